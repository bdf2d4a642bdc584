// tests/common/gradient_check.hpp — the contract of Backend::check_gradient and
// take_gradient_check on any backend (the CPU unit test and the CUDA parity test run it).
#pragma once

#include <functional>

#include "dtrain/dnn/backend.hpp"

namespace dtrain::test {

/// With momentum SGD over kLong-sized buffers: a check that finds a NaN (at a known index past
/// the first chunk, behind an Inf further on) makes the following update leave p and m unchanged,
/// and its answer is that index; a finite gradient's check lets the update through and answers
/// nullopt; answers come in order, at most Backend::kMaxPendingChecks unread, and a take without
/// an unread answer throws. GoogleTest assertions.
void expect_gradient_checks_guard_updates(Backend& be);

/// Backend::mark / seconds_between: the time between two points around `work` (which must take
/// at least `at_least` seconds of the backend's queue) is at least that and under 10 s; points
/// are reused; an index outside [0, kMarks) or a point never recorded throws Error.
void expect_stopwatch_times(Backend& be, double at_least, const std::function<void()>& work);

}  // namespace dtrain::test
