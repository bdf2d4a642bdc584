// dtrain/io/job_pool.cpp — src/io/job_pool.hpp: queued jobs whose items the reader's decode
// threads take oldest job first.
#include "job_pool.hpp"

#include <algorithm>
#include <climits>
#include <string>
#include <system_error>

#include "dtrain/core/error.hpp"

namespace dtrain {

JobPool::JobPool(int threads) {
  try {
    for (int t = 1; t < threads; ++t) helpers_.emplace_back([this, t] { work(t); });
  } catch (const std::system_error& e) {  // the threads started so far end before the throw
    const auto started = helpers_.size();
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    work_cv_.notify_all();
    for (auto& t : helpers_) t.join();
    throw LibraryError("cannot start decode thread " + std::to_string(started + 1) + " of " +
                       std::to_string(threads - 1) + " (--data-threads " + std::to_string(threads) +
                       "): " + e.what());
  }
}

JobPool::~JobPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : helpers_) t.join();
}

JobPool::Job* JobPool::claimable(const Job* after) {
  auto it = queue_.begin();
  if (after != nullptr) {
    it = std::find(queue_.begin(), queue_.end(), after);
    if (it != queue_.end()) ++it;
  }
  for (; it != queue_.end(); ++it)
    if ((*it)->next_.load() < (*it)->n_) return *it;
  return nullptr;
}

void JobPool::dequeue(Job& job) {
  queue_.erase(std::remove(queue_.begin(), queue_.end(), &job), queue_.end());
  job.queued_ = false;
}

bool JobPool::run_one(Job& job, int thread) {
  if (stop_.load(std::memory_order_relaxed)) return false;
  const int i = job.next_.fetch_add(1);
  if (i >= job.n_) return false;
  try {
    job.fn_(i, thread);
  } catch (...) {
    std::lock_guard<std::mutex> lock(mu_);
    if (!job.error_) job.error_ = std::current_exception();
  }
  job.done_.fetch_add(1);
  {
    // The waiter checks done_ under mu_: taking it here orders this item's end before the wake-up.
    std::lock_guard<std::mutex> lock(mu_);
  }
  done_cv_.notify_all();
  return true;
}

void JobPool::run_items(Job& job, int thread) {
  while (run_one(job, thread)) {
  }
}

void JobPool::work(int thread) {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    Job* job = nullptr;
    work_cv_.wait(lock, [&] { return stop_ || (job = claimable()) != nullptr; });
    if (stop_) return;
    ++job->users_;  // finish() and cancel() wait for users_ to drop to 0 before they return
    lock.unlock();
    run_items(*job, thread);
    lock.lock();
    --job->users_;
    done_cv_.notify_all();
  }
}

void JobPool::publish(Job& job, int n, std::function<void(int, int)> fn) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    DT_ASSERT(!job.queued_, "JobPool::publish: the job is queued already");
    DT_ASSERT(job.users_ == 0, "JobPool::publish: helpers are still inside the job");
    job.fn_ = std::move(fn);
    job.n_ = std::max(0, n);
    job.done_ = 0;
    job.error_ = nullptr;
    job.next_ = 0;
    job.queued_ = true;
    queue_.push_back(&job);
  }
  work_cv_.notify_all();
}

void JobPool::finish(Job& job) {
  run_items(job, 0);
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    if (job.done_.load() == job.n_ && job.users_ == 0) break;
    // Helpers are finishing job's last items: meanwhile the next job's items, one at a time, so
    // that this thread returns soon after job is complete.
    Job* later = job.done_.load() < job.n_ ? claimable(&job) : nullptr;
    if (later == nullptr) {
      done_cv_.wait(lock, [&] {
        return (job.done_.load() == job.n_ && job.users_ == 0) ||
               (job.done_.load() < job.n_ && claimable(&job) != nullptr);
      });
      continue;
    }
    lock.unlock();
    run_one(*later, 0);
    lock.lock();
  }
  dequeue(job);
  if (job.error_) std::rethrow_exception(job.error_);
}

void JobPool::cancel(Job& job) {
  std::unique_lock<std::mutex> lock(mu_);
  if (!job.queued_) return;
  job.next_.store(INT_MAX / 2);  // no item starts any more
  dequeue(job);
  done_cv_.wait(lock, [&] { return job.users_ == 0; });
}

}  // namespace dtrain
