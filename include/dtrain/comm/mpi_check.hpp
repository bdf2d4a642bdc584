// dtrain/comm/mpi_check.hpp — DT_CHECK_MPI and deadline-aware waits on MPI requests.
//
// Every blocking wait in dtrain goes through wait_all()/wait_any(): they poll with MPI_Test*,
// back off with short sleeps (so an oversubscribed ps or worker does not steal the compute core),
// and past the deadline throw TimeoutError naming this rank and the operation it waits in —
// the "stall inspector" of Horovod, per operation.
#pragma once

#include <mpi.h>

#include <functional>
#include <string>
#include <vector>

#include "dtrain/core/error.hpp"

namespace dtrain {

/// Formats an MPI error code with MPI_Error_string.
std::string mpi_error_string(int code);

/// Waits until every request completes (MPI_REQUEST_NULL entries are skipped; each completed one
/// is set to MPI_REQUEST_NULL): returns in the poll that completes the last active one, and polls
/// again at once after a poll that completed some (the rest of a message train is right behind).
/// `what` names the operation (e.g. "push to ps 1"). Throws TimeoutError (core/error.hpp) after
/// timeout_s seconds, LibraryError if a request fails.
void wait_all(std::vector<MPI_Request>& reqs, double timeout_s, const std::string& what);
/// Same for one request; `status` (may be nullptr: ignored) receives its MPI_Status. Throws
/// TimeoutError after timeout_s seconds, LibraryError if MPI_Test fails.
void wait_one(MPI_Request& req, double timeout_s, const std::string& what,
              MPI_Status* status = nullptr);
/// The same for a meeting that peers reach much later than others while they still work (async
/// workers at an epoch's end, each on its own shard): every `check_every_s` seconds `moved()`
/// says whether they made progress since it last asked, and the deadline counts timeout_s from the
/// last time they did. Throws TimeoutError (naming `what`) past it, LibraryError if MPI_Test
/// fails, and what `moved` throws.
void wait_one_while_moving(MPI_Request& req, double timeout_s, double check_every_s,
                           const std::function<bool()>& moved, const std::string& what);
/// Waits until one of the requests completes and returns its index (MPI_UNDEFINED if all are
/// inactive); the completed request is set to MPI_REQUEST_NULL and its MPI_Status written to
/// `status` (may be nullptr: ignored). Throws TimeoutError (core/error.hpp) after timeout_s
/// seconds, LibraryError if MPI_Testany fails.
int wait_any(std::vector<MPI_Request>& reqs, double timeout_s, const std::string& what,
             MPI_Status* status);
/// The same, the name built by what() only when the wait times out: for a loop that waits
/// thousands of times a second and names the peers it waits for (the ps event loop).
int wait_any(std::vector<MPI_Request>& reqs, double timeout_s,
             const std::function<std::string()>& what, MPI_Status* status);

/// Starts MPI as every dtrain program does: MPI_Init_thread asking for MPI_THREAD_MULTIPLE (the
/// bucketed allreduce's communication thread and the ps client's use it; with less they check
/// MPI_Query_thread and do without), and MPI_ERRORS_RETURN on MPI_COMM_WORLD so that a failed
/// call returns its code to DT_CHECK_MPI instead of aborting the job. Returns this process's rank
/// in MPI_COMM_WORLD. Call once, before any other MPI call; MPI_Finalize is the caller's.
int init_mpi(int* argc, char*** argv);

/// Process-wide default for the waits, in seconds (set from --timeout).
void set_comm_timeout(double seconds);
/// The value of the last set_comm_timeout(), in seconds (300 before any call).
double comm_timeout();

/// This process's rank in `c` / the size of `c` (MPI_Comm_rank / MPI_Comm_size). Throw
/// LibraryError when the call fails.
int comm_rank(MPI_Comm c);
int comm_size(MPI_Comm c);
/// The MPI_COMM_WORLD rank of each rank of `c`, in `c`'s rank order (MPI_Group_translate_ranks):
/// for messages that name a peer by the rank users see. Throws LibraryError when a call fails.
std::vector<int> world_ranks(MPI_Comm c);

}  // namespace dtrain

/// Evaluates the MPI call once and throws dtrain::LibraryError "<call> failed: <MPI_Error_string>
/// (file:line)" unless it returns MPI_SUCCESS.
#define DT_CHECK_MPI(call)                                                                     \
  do {                                                                                         \
    const int dt_mpi_rc_ = (call);                                                             \
    if (dt_mpi_rc_ != MPI_SUCCESS)                                                             \
      throw ::dtrain::LibraryError(::dtrain::format_error(                                     \
          std::string(#call) + " failed: " + ::dtrain::mpi_error_string(dt_mpi_rc_), __FILE__, \
          __LINE__));                                                                          \
  } while (0)
