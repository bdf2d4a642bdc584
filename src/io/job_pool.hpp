// src/io/job_pool.hpp — private to src/io: the decode threads of one reader. Jobs (a batch's
// images) are queued in order and the threads take their items first come, first served, oldest
// job first, so that a thread that finds the current batch's last images taken starts on the next
// batch instead of waiting for the slowest thread at every batch's end.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace dtrain {

/// `threads` − 1 helper threads plus the caller of finish() (thread number 0). Not re-entrant:
/// publish(), finish() and cancel() are called from one thread, the owner's.
class JobPool {
 public:
  /// n items, item i run as fn(i, thread number) exactly once unless cancelled. Owned by the
  /// caller, which keeps it alive and unmoved from publish() until finish() or cancel() returns
  /// (and may then publish it again).
  class Job {
   public:
    Job() = default;
    Job(const Job&) = delete;
    Job& operator=(const Job&) = delete;

   private:
    friend class JobPool;
    std::function<void(int, int)> fn_;
    int n_ = 0;
    std::atomic<int> next_{0};  ///< the next item to claim (grows past n_ once all are claimed)
    std::atomic<int> done_{0};  ///< items finished
    int users_ = 0;             ///< helpers inside this job's items (under the pool's mutex)
    bool queued_ = false;       ///< under the pool's mutex
    std::exception_ptr error_;  ///< the first exception an item threw (under the pool's mutex)
  };

  explicit JobPool(int threads);
  /// Stops the helpers after the item each is running; queued jobs are abandoned.
  ~JobPool();
  JobPool(const JobPool&) = delete;
  JobPool& operator=(const JobPool&) = delete;

  [[nodiscard]] int threads() const { return static_cast<int>(helpers_.size()) + 1; }

  /// Queues job behind the jobs already queued; helpers start on its items at once. job must not
  /// be queued already; n ≥ 0.
  void publish(Job& job, int n, std::function<void(int, int)> fn);

  /// Runs job's unclaimed items on the calling thread (thread number 0); then, while helpers still
  /// run some of them, one item at a time of the jobs queued after it; returns when every item of
  /// job has finished and no helper is inside it, job dequeued. Rethrows the first exception an
  /// item of job threw (after every item finished).
  void finish(Job& job);

  /// Dequeues job: no item of it starts any more; returns when the running ones have finished.
  /// An exception they threw is dropped. A job that is not queued is left as it is.
  void cancel(Job& job);

 private:
  void work(int thread);
  /// Claims and runs items of job until none is left (or the pool stops).
  void run_items(Job& job, int thread);
  /// Claims one item of job and runs it; false when none was left.
  bool run_one(Job& job, int thread);
  /// The oldest queued job with an unclaimed item (after `after` when given), or null. Under mu_.
  Job* claimable(const Job* after = nullptr);
  void dequeue(Job& job);  ///< under mu_

  std::mutex mu_;
  std::condition_variable work_cv_;  ///< a job was queued, or stop
  std::condition_variable done_cv_;  ///< an item finished, or a helper left a job
  std::deque<Job*> queue_;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> helpers_;
};

}  // namespace dtrain
