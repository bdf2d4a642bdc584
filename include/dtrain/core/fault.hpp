// dtrain/core/fault.hpp — TEST-ONLY fault injection, so that the fault tests
// (tests/cli/test_faults_*.sh) can make a rank crash, hang or produce a NaN at a chosen point.
//
// The environment variable DTRAIN_FAULT is read once, by init_fault_injection() in main(), and
// nowhere else. Syntax: KIND[@STEP][:RANK]
//   kill-in-checkpoint-write[@S]  the chief SIGKILLs itself after writing part of the temporary
//                                 file of the first checkpoint whose global_step is >= S
//                                 (default 0)
//   nan-gradient@S[:R]            a NaN is written into the gradient (first value of the model's
//                                 last parameter tensor) at the first step whose global_step is
//                                 >= S
//   hang@S[:R]                    the worker sleeps forever at the first step with global_step >= S
//   hang-reader@K[:R]             the batch reader thread sleeps forever on reading the first batch
//                                 whose index in its epoch is >= K (BatchReader::next times out)
//   hang-ps-snapshot@S[:R]        the ps sleeps forever on the first SNAPSHOT request (a
//                                 checkpoint's) that comes at a global_step >= S
//   slow*F[:R]                    a straggler: every training step (forward + backward) of the
//                                 worker takes F times as long (it sleeps (F − 1) × the step's
//                                 time)
//   slow+MS[:R]                   the same by a fixed MS milliseconds more a step (a straggler
//                                 whose lag is known whatever the load)
//   slow-eval[:R]                 every evaluation batch of the worker takes 0.2 s longer: an
//                                 evaluation long enough to send a signal during it
//   no-shared-memory[:R]          the rank can neither make memory to share (SharedRing::create
//                                 throws, as where memfd_create is refused) nor map memory
//                                 another process shares with it (SharedRing::open fails, as
//                                 where /proc/PID/fd of another process cannot be opened): the
//                                 hierarchical allreduce and the ps rings then take their MPI
//                                 paths, or fail naming the rank
// R is a world rank (default: every rank the hook runs on). Unset or empty: no fault, no cost
// beyond one comparison. A malformed value is an InputError naming DTRAIN_FAULT.
#pragma once

#include <cstdint>
#include <string>

namespace dtrain {

enum class FaultKind {
  none,
  kill_in_checkpoint_write,
  nan_gradient,
  hang,
  hang_reader,
  hang_ps_snapshot,
  slow,
  slow_eval,
  no_shared_memory
};

/// A parsed DTRAIN_FAULT value.
struct FaultSpec {
  FaultKind kind = FaultKind::none;
  /// The @STEP threshold (≥ 0, default 0) that fault_fires() compares with: a global step, but for
  /// hang-reader a batch index within the reader's epoch
  std::int64_t step = 0;
  int rank = -1;       ///< world rank, -1: any
  double factor = 1;   ///< slow*F: the slowdown factor (> 1)
  double delay_s = 0;  ///< slow+MS: the seconds added to every step
};

/// Parses a DTRAIN_FAULT value (exposed for tests). Throws InputError on a malformed value.
FaultSpec parse_fault_spec(const std::string& value);

/// Reads DTRAIN_FAULT once (main() calls it right after MPI_Init); later calls do nothing, even
/// after a failed first one. Throws InputError naming DTRAIN_FAULT on a malformed value.
void init_fault_injection(int world_rank);

/// The slowdown factor of a `slow*F` fault on this rank; 1 without one.
double fault_slowdown();

/// The seconds a `slow+MS` fault adds to every step on this rank; 0 without one.
double fault_delay();

/// True when the injected fault is `kind` and applies to this rank (a standing condition, such as
/// no_shared_memory, rather than a one-shot event).
bool fault_active(FaultKind kind);

/// True exactly once: the first time it is called with kind == the injected kind, this rank
/// matching and global_step >= the injected step (for hang_reader the caller passes the batch
/// index as global_step).
bool fault_fires(FaultKind kind, std::int64_t global_step);

/// A hang fault that fired: logs "DTRAIN_FAULT: <what> hangs forever" and sleeps for ever (the
/// thread it is called on; the rank's other threads go on).
[[noreturn]] void hang_forever(const std::string& what);

}  // namespace dtrain
