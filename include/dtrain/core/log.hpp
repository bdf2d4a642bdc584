// dtrain/core/log.hpp — rank-tagged logging to stdout/stderr, and a monotonic wall clock.
#pragma once

#include <string>

namespace dtrain {

/// Prints one line to stdout (flushed). Thread-safe.
void log_info(const std::string& line);

/// Prints one line to stderr, prefixed with "dtrain: error: " and the error context. Thread-safe.
void log_error(const std::string& line);

/// Prints one line to stderr, prefixed with "dtrain: warning: ". Thread-safe.
void log_warn(const std::string& line);

/// Seconds since an arbitrary fixed point (steady clock).
double now_seconds();
/// This process's peak resident set size so far (getrusage ru_maxrss), MiB.
double peak_rss_mib();

}  // namespace dtrain
