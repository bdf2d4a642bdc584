// dtrain/core/timeline.hpp — this process's spans for --timeline: a Chrome trace (the Trace Event
// Format's complete events, "ph": "X", times in microseconds) that chrome://tracing and Perfetto
// open, in the spirit of Horovod's timeline. Every rank records its own spans in memory (one
// track per rank); train/trainer.cpp merges them into <run_dir>/timeline.json at the end.
//
// Off (the default), a span costs one branch on a bool. A rank has two tracks (Chrome trace
// "tid"s): the training thread's (0) and the communication thread's (kCommTrack: gradient
// buckets reduced while backward runs); each thread records on its own track only, so on one
// track spans are either disjoint or nested.
#pragma once

#include <mutex>
#include <string>
#include <vector>

namespace dtrain {

class Timeline {
 public:
  /// The track of the communication thread (collectives/bucketed.hpp); the training thread's is 0.
  static constexpr int kCommTrack = 1;
  /// The process's timeline.
  static Timeline& instance();
  /// Starts recording; `origin` (seconds, now_seconds()'s clock) becomes time 0 of the trace.
  void enable(double origin);
  [[nodiscard]] bool enabled() const { return enabled_; }
  /// Records span `name` of category `cat` over [t0, t1] (now_seconds() clock) on track `tid`.
  /// Names and categories must be string literals (they are kept as pointers). Thread-safe.
  void add(const char* name, const char* cat, double t0, double t1, int tid = 0);
  /// This rank's events as JSON objects separated by commas (no brackets), with pid = `pid`.
  [[nodiscard]] std::string events_json(int pid) const;
  /// Number of recorded spans.
  [[nodiscard]] std::size_t size() const;

 private:
  struct Span {
    const char* name;
    const char* cat;
    double t0, t1;
    int tid;
  };
  mutable std::mutex mu_;
  bool enabled_ = false;
  double origin_ = 0;
  std::vector<Span> spans_;
};

/// RAII: records a span from construction to destruction when the timeline is enabled.
class TimelineSpan {
 public:
  /// `tid`: the track (0: training thread; Timeline::kCommTrack on the communication thread).
  TimelineSpan(const char* name, const char* cat, int tid = 0);
  ~TimelineSpan();
  TimelineSpan(const TimelineSpan&) = delete;
  TimelineSpan& operator=(const TimelineSpan&) = delete;

 private:
  const char* name_;
  const char* cat_;
  int tid_;
  double t0_ = 0;
};

}  // namespace dtrain
