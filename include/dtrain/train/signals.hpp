// dtrain/train/signals.hpp — graceful stop on SIGTERM, SIGUSR1 (what Slurm sends before a time
// limit or preemption: `--signal=B:USR1@N`) and SIGINT.
//
// The first signal sets a flag that the training loop reads at the next step boundary: every rank
// holding state checkpoints, then the process exits with kExitSignalled (75). A second SIGTERM or
// SIGINT exits at once with 128+signo: checkpoints are written to a temporary file and renamed, so
// the newest complete checkpoint is never corrupted. Repeated SIGUSR1s are ignored: under Slurm one
// request reaches a rank several times (`scancel --full --signal=USR1` signals every process of the
// job, and mpirun and slurm/train.sbatch forward it as well).
#pragma once

#include <atomic>

namespace dtrain {

/// Installs the handlers (idempotent). Async-signal-safe handlers only touch atomics and _exit.
void install_signal_handlers();
/// True once SIGTERM, SIGUSR1 or SIGINT arrived after install_signal_handlers(): only the handler
/// sets the flag (a stop asked by another rank reaches this one through the exchange instead).
bool stop_requested();
/// The flag itself, for loops that forward it (the ps puts it in every reply).
const std::atomic<bool>& stop_flag();
/// The signal number that requested the stop (0 if none).
int stop_signal();

}  // namespace dtrain
