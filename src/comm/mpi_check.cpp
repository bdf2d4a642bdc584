// dtrain/comm/mpi_check.cpp — MPI error strings and polling waits with deadlines.
#include "dtrain/comm/mpi_check.hpp"

#include <algorithm>
#include <atomic>
#include <thread>
#include <type_traits>

#include "dtrain/core/log.hpp"

namespace dtrain {
namespace {
std::atomic<double> g_timeout{300.0};

/// What one poll of a wait found: nothing; some requests completed (poll again at once); the wait's
/// peers are alive and moving (the deadline starts again); everything it waits for.
enum class Poll { nothing, progress, moved, done };

/// Polls `test` until it returns Poll::done: for kSpinSeconds after the start, and after every
/// poll that found progress (some of the requests completed: a pipelined transfer whose chunks
/// keep arriving), it polls back to back — at once after a poll that found progress, yielding the
/// core after one that found nothing (a ps reply or a peer's
/// bucket is usually that close: the round-trip latency of a small push-pull is the bare MPI
/// latency, not a sleep; and a receiver that sleeps stalls a shared-memory transfer, which the
/// receiver copies); then it sleeps between polls (nap_us: within a few µs of the time asked,
/// not Linux's default 50 µs timer slack late), doubling the sleep from 50 µs up to 100 µs
/// while the wait is young and up to 1 ms once it has lasted 0.1 s (an idle ps, a worker waiting
/// for a slower peer), so that a long wait gives its core to the ranks that compute.
/// `what` names the wait in its TimeoutError: a string, or a callable returning one (built only
/// then).
template <typename Test, typename What>
void poll_until(Test test, double timeout_s, const What& what) {
  constexpr double kSpinSeconds = 200e-6;
  const double start = now_seconds();
  double deadline = start + timeout_s;
  double spin_from = start;
  int sleep_us = 50;
  for (;;) {
    const Poll p = test();
    if (p == Poll::done) return;
    const double now = now_seconds();
    if (p == Poll::moved) deadline = now + timeout_s;
    if (p == Poll::progress) {  // poll again at once: the rest is usually right behind
      spin_from = now;
      sleep_us = 50;
      continue;
    }
    if (now - spin_from < kSpinSeconds) {
      std::this_thread::yield();
      continue;
    }
    if (now > deadline) {
      if constexpr (std::is_invocable_v<What>) throw TimeoutError(timeout_s, what());
      else throw TimeoutError(timeout_s, what);
    }
    nap_us(sleep_us);
    sleep_us = std::min(2 * sleep_us, now - start < 0.1 ? 100 : 1000);
  }
}
}  // namespace

std::string mpi_error_string(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, buf, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(code);
  return std::string(buf, len);
}

int init_mpi(int* argc, char*** argv) {
  int provided = 0;
  MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided);
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

void set_comm_timeout(double seconds) { g_timeout = seconds; }
double comm_timeout() { return g_timeout; }

int comm_rank(MPI_Comm c) {
  int r = 0;
  DT_CHECK_MPI(MPI_Comm_rank(c, &r));
  return r;
}

int comm_size(MPI_Comm c) {
  int s = 0;
  DT_CHECK_MPI(MPI_Comm_size(c, &s));
  return s;
}

std::vector<int> world_ranks(MPI_Comm c) {
  const int n = comm_size(c);
  MPI_Group mine = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  DT_CHECK_MPI(MPI_Comm_group(c, &mine));
  DT_CHECK_MPI(MPI_Comm_group(MPI_COMM_WORLD, &world));
  std::vector<int> local(static_cast<std::size_t>(n)), out(local.size());
  for (int r = 0; r < n; ++r) local[static_cast<std::size_t>(r)] = r;
  DT_CHECK_MPI(MPI_Group_translate_ranks(mine, n, local.data(), world, out.data()));
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  return out;
}

void wait_all(std::vector<MPI_Request>& reqs, double timeout_s, const std::string& what) {
  // Active requests left: done once every one has completed, without a further poll.
  auto active = static_cast<int>(
      std::count_if(reqs.begin(), reqs.end(), [](MPI_Request r) { return r != MPI_REQUEST_NULL; }));
  if (active == 0) return;
  std::vector<int> index(reqs.size());
  poll_until(
      [&] {
        int count = 0;
        DT_CHECK_MPI(MPI_Testsome(static_cast<int>(reqs.size()), reqs.data(), &count, index.data(),
                                  MPI_STATUSES_IGNORE));
        if (count == MPI_UNDEFINED) return Poll::done;  // no active request left
        active -= count;
        if (active <= 0) return Poll::done;
        return count > 0 ? Poll::progress : Poll::nothing;
      },
      timeout_s, what);
}

void wait_one(MPI_Request& req, double timeout_s, const std::string& what, MPI_Status* status) {
  poll_until(
      [&] {
        int done = 0;
        DT_CHECK_MPI(MPI_Test(&req, &done, status ? status : MPI_STATUS_IGNORE));
        return done != 0 ? Poll::done : Poll::nothing;
      },
      timeout_s, what);
}

void wait_one_while_moving(MPI_Request& req, double timeout_s, double check_every_s,
                           const std::function<bool()>& moved, const std::string& what) {
  double next_check = now_seconds() + check_every_s;
  poll_until(
      [&] {
        int done = 0;
        DT_CHECK_MPI(MPI_Test(&req, &done, MPI_STATUS_IGNORE));
        if (done != 0) return Poll::done;
        const double now = now_seconds();
        if (now < next_check) return Poll::nothing;
        const bool alive = moved();
        next_check = now_seconds() + check_every_s;
        return alive ? Poll::moved : Poll::nothing;
      },
      timeout_s, what);
}

namespace {
template <typename What>
int wait_any_named(std::vector<MPI_Request>& reqs, double timeout_s, const What& what,
                   MPI_Status* status) {
  int index = MPI_UNDEFINED;
  poll_until(
      [&] {
        int done = 0;
        DT_CHECK_MPI(MPI_Testany(static_cast<int>(reqs.size()), reqs.data(), &index, &done,
                                 status ? status : MPI_STATUS_IGNORE));
        return done != 0 ? Poll::done : Poll::nothing;
      },
      timeout_s, what);
  return index;
}
}  // namespace

int wait_any(std::vector<MPI_Request>& reqs, double timeout_s, const std::string& what,
             MPI_Status* status) {
  return wait_any_named(reqs, timeout_s, what, status);
}

int wait_any(std::vector<MPI_Request>& reqs, double timeout_s,
             const std::function<std::string()>& what, MPI_Status* status) {
  return wait_any_named(reqs, timeout_s, what, status);
}

}  // namespace dtrain
