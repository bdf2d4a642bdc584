// dtrain/comm/guard.cpp — agree on success of a set-up phase across ranks.
#include "dtrain/comm/guard.hpp"

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
  // Lowest failing rank: minimise (failed ? rank : size).
  int first = code ? rank : size;
  DT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, comm));
  if (first == size) return;
  int shared_code = code;
  DT_CHECK_MPI(MPI_Bcast(&shared_code, 1, MPI_INT, first, comm));
  if (rank == first) log_error(message);
  throw ReportedError(shared_code, message);
}

}  // namespace dtrain
