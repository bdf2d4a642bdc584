// dtrain/comm/guard.cpp — agree on success of a set-up phase across ranks.
#include "dtrain/comm/guard.hpp"

#include <memory>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/log.hpp"

namespace dtrain {

void all_or_nothing(MPI_Comm comm, const std::function<void()>& fn) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  int code = 0;
  std::string message;
  try {
    fn();
  } catch (const ReportedError&) {
    throw;
  } catch (const std::exception& e) {
    code = exit_code(e);
    message = e.what();
  }
  // Lowest failing rank: minimise (failed ? rank : size). Non-blocking, with the --timeout
  // deadline: a rank stuck in its set-up (a hung file system) must not leave the others waiting
  // here for ever. The buffers live on the heap: after a timeout the posted collective may still
  // write into them when the late rank arrives, so they are then left allocated.
  struct Agreement {
    int first, code;
  };
  auto a = std::make_unique<Agreement>(Agreement{code ? rank : size, code});
  MPI_Request req = MPI_REQUEST_NULL;
  try {
    DT_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, &a->first, 1, MPI_INT, MPI_MIN, comm, &req));
    wait_one(req, comm_timeout(), "agreeing on the set-up with all ranks (allreduce)");
    if (a->first == size) return;
    DT_CHECK_MPI(MPI_Ibcast(&a->code, 1, MPI_INT, a->first, comm, &req));
    wait_one(req, comm_timeout(),
             "agreeing on the set-up error of rank " + std::to_string(a->first));
  } catch (const TimeoutError&) {
    (void)a.release();  // MPI may still write into it
    throw;
  }
  const int first = a->first, shared_code = a->code;
  if (rank == first) log_error(message);
  throw ReportedError(shared_code, message);
}

}  // namespace dtrain
