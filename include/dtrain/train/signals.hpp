// dtrain/train/signals.hpp — graceful stop on SIGTERM, SIGUSR1 (what Slurm sends before a time
// limit or preemption: `--signal=B:USR1@N`) and SIGINT.
//
// The first signal sets a flag that the training loop reads at the next step boundary: every rank
// holding state checkpoints, then the process exits with kExitSignalled (75). A second SIGTERM or
// SIGINT exits at once with 128+signo: checkpoints are written to a temporary file and renamed, so
// the newest complete checkpoint is never corrupted. Repeated SIGUSR1s are ignored: under Slurm one
// request reaches a rank several times (`scancel --full --signal=USR1` signals every process of the
// job, and mpirun and slurm/train.sbatch forward it as well).
//
// No handler runs on a thread that computes: the three signals are blocked in every thread and
// taken by one thread of their own with sigwait(2). A handler would run on whichever thread the
// kernel picks, with its frame written below that thread's stack pointer — and oneDNN's generated
// GEMM kernels (x64, AVX2 and AVX-512; every release before the fix of March 2026, Debian 12 ships
// 2.6) point the stack pointer into a heap buffer while they run, so a signal arriving there
// overwrote the heap (oneDNN issue #4845; a worker stopped by SIGTERM later aborted in H5Fclose's
// free(), "double free or corruption"). tests/tools/compute_under_signals.cpp reproduces it.
#pragma once

#include <atomic>

namespace dtrain {

/// Blocks SIGTERM, SIGUSR1 and SIGINT in the calling thread, and so in every thread it starts
/// afterwards (MPI's, OpenMP's, the CUDA driver's, dtrain's), and starts the thread that takes
/// them. Call it first in main(), before MPI_Init and before any other thread exists (a thread
/// started earlier keeps the signals unblocked and may be picked to run their default action).
/// Until arm_graceful_stop(), a signal ends the process as its default action would (killed by
/// that signal). Idempotent; throws LibraryError when the mask cannot be set, std::system_error
/// when the thread cannot start.
void route_stop_signals();
/// From now on the first signal requests the graceful stop (stop_requested()); calls
/// route_stop_signals() if it was not called yet. Idempotent.
void arm_graceful_stop();
/// True once SIGTERM, SIGUSR1 or SIGINT arrived after arm_graceful_stop(): only the signal thread
/// sets the flag (a stop asked by another rank reaches this one through the exchange instead).
bool stop_requested();
/// The flag itself, for loops that forward it (the ps puts it in every reply).
const std::atomic<bool>& stop_flag();
/// The signal number that requested the stop (0 if none).
int stop_signal();

}  // namespace dtrain
