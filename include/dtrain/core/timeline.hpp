// dtrain/core/timeline.hpp — this process's spans for --timeline: a Chrome trace (the Trace Event
// Format's complete events, "ph": "X", times in microseconds) that chrome://tracing and Perfetto
// open, in the spirit of Horovod's timeline. Every rank records its own spans in memory (one
// track per rank); train/trainer.cpp merges them into <run_dir>/timeline.json at the end.
//
// Off (the default), a span costs one branch on a bool. Spans are recorded by the training
// thread only, so on one track they are either disjoint or nested.
#pragma once

#include <string>
#include <vector>

namespace dtrain {

class Timeline {
 public:
  /// The process's timeline.
  static Timeline& instance();
  /// Starts recording; `origin` (seconds, now_seconds()'s clock) becomes time 0 of the trace.
  void enable(double origin);
  [[nodiscard]] bool enabled() const { return enabled_; }
  /// Records span `name` of category `cat` over [t0, t1] (now_seconds() clock). Names and
  /// categories must be string literals (they are kept as pointers).
  void add(const char* name, const char* cat, double t0, double t1);
  /// This rank's events as JSON objects separated by commas (no brackets), with pid = `pid`.
  [[nodiscard]] std::string events_json(int pid) const;
  /// Number of recorded spans.
  [[nodiscard]] std::size_t size() const { return spans_.size(); }

 private:
  struct Span {
    const char* name;
    const char* cat;
    double t0, t1;
  };
  bool enabled_ = false;
  double origin_ = 0;
  std::vector<Span> spans_;
};

/// RAII: records a span from construction to destruction when the timeline is enabled.
class TimelineSpan {
 public:
  TimelineSpan(const char* name, const char* cat);
  ~TimelineSpan();
  TimelineSpan(const TimelineSpan&) = delete;
  TimelineSpan& operator=(const TimelineSpan&) = delete;

 private:
  const char* name_;
  const char* cat_;
  double t0_ = 0;
};

}  // namespace dtrain
