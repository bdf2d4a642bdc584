// dtrain/core/log.hpp — rank-tagged logging to stdout/stderr, a monotonic wall clock, and the
// polling waits' short sleep.
#pragma once

#include <string>

namespace dtrain {

/// Prints one line to stdout (flushed). Thread-safe.
void log_info(const std::string& line);

/// Prints one line to stderr, prefixed with "dtrain: error: " and the rank tag (the error context,
/// core/error.hpp: with_error_prefix(), which leaves a line that starts with one as it is).
/// Thread-safe.
void log_error(const std::string& line);

/// Prints one line to stderr, prefixed with "dtrain: warning: ". Thread-safe.
void log_warn(const std::string& line);

/// Seconds since an arbitrary fixed point (steady clock).
double now_seconds();
/// Sleeps `microseconds` (≥ 0) as a polling wait's back-off: the calling thread's timer slack is
/// first set to kNapSlackNs (prctl PR_SET_TIMERSLACK, once per thread), so the sleep ends within a
/// few µs of its time instead of Linux's default 50 µs late — which more than doubled a 50 µs
/// back-off, and, on a core a ps shares with a worker, tripled a 1 MiB push-pull (README,
/// "Communication"). Throws nothing.
void nap_us(int microseconds);
/// The timer slack nap_us sets, nanoseconds.
inline constexpr unsigned long kNapSlackNs = 1000;
/// This process's peak resident set size so far (getrusage ru_maxrss), MiB.
double peak_rss_mib();

}  // namespace dtrain
