// dtrain/core/timeline.cpp — in-memory spans and their Trace Event Format text.
#include "dtrain/core/timeline.hpp"

#include <cstdio>
#include <mutex>

#include "dtrain/core/log.hpp"

namespace dtrain {

Timeline& Timeline::instance() {
  static Timeline t;
  return t;
}

void Timeline::enable(double origin) {
  enabled_ = true;
  origin_ = origin;
  spans_.reserve(1 << 16);
}

void Timeline::add(const char* name, const char* cat, double t0, double t1, int tid) {
  const std::lock_guard<std::mutex> lock(mu_);
  spans_.push_back({name, cat, t0, t1, tid});
}

std::size_t Timeline::size() const {
  const std::lock_guard<std::mutex> lock(mu_);
  return spans_.size();
}

std::string Timeline::events_json(int pid) const {
  const std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  out.reserve(spans_.size() * 96);
  char b[256];
  bool comm = false;
  for (const Span& s : spans_) {
    const double ts = (s.t0 - origin_) * 1e6, dur = (s.t1 - s.t0) * 1e6;
    std::snprintf(b, sizeof b,
                  "%s{\"name\":\"%s\",\"cat\":\"%s\",\"ph\":\"X\",\"pid\":%d,\"tid\":%d,"
                  "\"ts\":%.3f,\"dur\":%.3f}",
                  out.empty() ? "" : ",\n", s.name, s.cat, pid, s.tid, ts, dur);
    out += b;
    comm = comm || s.tid == kCommTrack;
  }
  if (comm) {  // name the second track of this rank (Trace Event Format metadata event)
    std::snprintf(b, sizeof b,
                  ",\n{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":%d,\"tid\":%d,"
                  "\"args\":{\"name\":\"communication\"}}",
                  pid, kCommTrack);
    out += b;
  }
  return out;
}

TimelineSpan::TimelineSpan(const char* name, const char* cat, int tid)
    : name_(name), cat_(cat), tid_(tid) {
  if (Timeline::instance().enabled()) t0_ = now_seconds();
}

TimelineSpan::~TimelineSpan() {
  Timeline& t = Timeline::instance();
  if (t.enabled()) t.add(name_, cat_, t0_, now_seconds(), tid_);
}

}  // namespace dtrain
