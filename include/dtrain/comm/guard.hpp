// dtrain/comm/guard.hpp — all-or-nothing set-up phases: an error on any rank becomes one message
// and the same exit code on every rank, with no rank left waiting in a collective.
#pragma once

#include <mpi.h>

#include <functional>

#include "dtrain/core/error.hpp"

namespace dtrain {

/// Thrown on every rank after a guarded phase failed somewhere; the message was already printed.
class ReportedError : public Error {
 public:
  /// code: the process exit code (an ExitCode, e.g. kExitFault); msg: what() (may be empty).
  ReportedError(int code, const std::string& msg) : Error(msg), code_(code) {}
  /// The exit code main() returns for it, after MPI_Finalize and without printing or MPI_Abort.
  [[nodiscard]] int code() const { return code_; }

 private:
  int code_;
};

/// Runs fn on this rank, then agrees with every rank of comm (one MPI_Allreduce and one
/// MPI_Bcast): if fn threw anywhere, the lowest failing rank prints its message (log_error) and
/// every rank throws ReportedError with that rank's exit code. fn must not call collectives that
/// some ranks could skip by throwing early, except deterministic ones every rank reaches. The
/// agreement is non-blocking with the comm_timeout() deadline (--timeout): a rank whose fn takes
/// longer makes the waiting ranks throw TimeoutError "timed out after T s waiting in: agreeing on
/// the set-up ...". A ReportedError thrown by fn is rethrown at once, without the agreement step;
/// a failed MPI call of the agreement throws LibraryError. The ReportedError's what() is this
/// rank's own message (empty where fn succeeded).
void all_or_nothing(MPI_Comm comm, const std::function<void()>& fn);

}  // namespace dtrain
