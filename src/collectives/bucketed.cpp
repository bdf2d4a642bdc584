// dtrain/collectives/bucketed.cpp — bucketed gradient allreduce on a communication thread (see
// collectives/bucketed.hpp for the design and its measurements).
#include "dtrain/collectives/bucketed.hpp"

#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdio>
#include <utility>

#include "dtrain/comm/affinity.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/timeline.hpp"

namespace dtrain {

std::size_t end_bucket_floats(std::size_t bucket_floats) {
  return std::max<std::size_t>(1, bucket_floats / kEndBucketDivisor);
}

std::vector<Bucket> plan_buckets(std::size_t count, std::size_t bucket_floats) {
  return plan_buckets(count, bucket_floats, end_bucket_floats(bucket_floats));
}

std::vector<Bucket> plan_buckets(std::size_t count, std::size_t bucket_floats,
                                 std::size_t end_floats) {
  const std::size_t s = std::max<std::size_t>(1, std::min(end_floats, bucket_floats));
  if (bucket_floats == 0 || count <= s) return {Bucket{0, count}};
  const std::size_t top = count - s;  // [top, count): the last layers, the first bucket
  std::vector<Bucket> out{Bucket{top, count}};
  std::vector<Bucket> front;  // from offset 0 up: s, 2s, 4s, ... ≤ bucket_floats
  for (std::size_t begin = 0, size = s; begin < top; size = std::min(bucket_floats, 2 * size)) {
    const std::size_t end = std::min(top, begin + size);
    front.push_back({begin, end});
    begin = end;
  }
  out.insert(out.end(), front.rbegin(), front.rend());
  return out;
}

RingCost ring_cost(const Link& link, int ranks, double value_bytes) {
  RingCost r;
  r.ranks = ranks;
  r.alpha_s = link.alpha_us * 1e-6;
  r.bytes_per_s = link.bytes_per_second() / (link.shared ? std::max(ranks, 1) : 1);
  r.value_bytes = value_bytes;
  return r;
}

RingCost probe_ring(MPI_Comm comm, double value_bytes) {
  RingCost r;
  DT_CHECK_MPI(MPI_Comm_size(comm, &r.ranks));
  r.value_bytes = value_bytes;
  if (r.ranks <= 1) return r;
  constexpr int kLarge = 1 << 20;        // floats: 4 MiB
  std::vector<float> buf(kLarge, 0.0f);  // zeros: the sums stay zero
  const auto fastest = [&](int n, int reps) {
    double best = 0;
    for (int k = 0; k <= reps; ++k) {  // k = 0: the warm-up
      DT_CHECK_MPI(MPI_Barrier(comm));
      const double t0 = MPI_Wtime();
      DT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, buf.data(), n, MPI_FLOAT, MPI_SUM, comm));
      const double t = MPI_Wtime() - t0;
      if (k == 1 || (k > 1 && t < best)) best = t;
    }
    return best;
  };
  double t[2] = {fastest(1, 20), fastest(kLarge, 5)};
  DT_CHECK_MPI(MPI_Bcast(t, 2, MPI_DOUBLE, 0, comm));  // the chief's figures on every rank
  const double p = r.ranks;
  r.alpha_s = t[0] / (2 * (p - 1));
  r.bytes_per_s = 2 * (p - 1) / p * 4.0 * kLarge / std::max(t[1] - t[0], 1e-9);
  return r;
}

std::size_t latency_min_bucket_floats(const RingCost& ring) {
  DT_REQUIRE(
      ring.ranks >= 1 && ring.alpha_s >= 0 && std::isfinite(ring.alpha_s) && ring.bytes_per_s > 0 &&
          std::isfinite(ring.bytes_per_s) && (ring.value_bytes == 2 || ring.value_bytes == 4) &&
          ring.latency_share > 0 && std::isfinite(ring.latency_share),
      "latency-aware buckets: expected ranks >= 1, latency >= 0 s, bandwidth > 0 B/s, 2 or "
      "4 bytes a value and a latency share > 0, got p = " +
          std::to_string(ring.ranks) + ", α = " + std::to_string(ring.alpha_s) +
          " s, β = " + std::to_string(ring.bytes_per_s) + " B/s, " +
          std::to_string(ring.value_bytes) + " bytes, f = " + std::to_string(ring.latency_share));
  if (ring.ranks <= 1 || ring.alpha_s == 0) return 0;
  // 2(p−1)α ≤ f·2(p−1)/p·bytes/β  ⇔  bytes ≥ p·α·β/f
  const double bytes = ring.ranks * ring.alpha_s * ring.bytes_per_s / ring.latency_share;
  return static_cast<std::size_t>(std::ceil(bytes / ring.value_bytes));
}

std::vector<Bucket> plan_buckets(std::size_t count, std::size_t bucket_floats,
                                 const RingCost& ring) {
  const std::size_t m = latency_min_bucket_floats(ring);
  if (bucket_floats == 0 || m <= end_bucket_floats(bucket_floats))
    return plan_buckets(count, bucket_floats);
  std::vector<Bucket> out = plan_buckets(count, std::max(bucket_floats, m), m);
  // Only the piece next to the first bucket (the front's remainder) can be shorter than m.
  if (out.size() >= 2 && out[1].end - out[1].begin < m) {
    out[0].begin = out[1].begin;
    out.erase(out.begin() + 1);
  }
  return out;
}

BucketedAllreduce::BucketedAllreduce(MPI_Comm comm, std::size_t count, std::size_t bucket_floats,
                                     bool overlap, const ReduceOptions& how)
    : BucketedAllreduce(comm, count, plan_buckets(count, bucket_floats), overlap, how) {}

BucketedAllreduce::BucketedAllreduce(MPI_Comm comm, std::size_t count, std::vector<Bucket> buckets,
                                     bool overlap, const ReduceOptions& how)
    : comm_(comm), count_(count), buckets_(std::move(buckets)) {
  DT_ASSERT(!buckets_.empty() && buckets_.front().end == count && buckets_.back().begin == 0,
            "BucketedAllreduce: the buckets must run from the gradient count down to 0");
  for (std::size_t k = 1; k < buckets_.size(); ++k)
    DT_ASSERT(buckets_[k].end == buckets_[k - 1].begin && buckets_[k].begin < buckets_[k].end,
              "BucketedAllreduce: the buckets must be contiguous and not empty");
  for (const Bucket& b : buckets_)
    DT_REQUIRE(b.end - b.begin < static_cast<std::size_t>(INT_MAX),
               "--bucket-mb: a bucket of " + std::to_string(b.end - b.begin) +
                   " floats exceeds MPI's count limit; choose a smaller --bucket-mb");
  int level = MPI_THREAD_SINGLE;
  DT_CHECK_MPI(MPI_Query_thread(&level));
  threaded_ = level >= MPI_THREAD_MULTIPLE;
  overlap_ = overlap && threaded_;
  if (how.hierarchical) {
    std::size_t largest = 0;
    for (const Bucket& b : buckets_) largest = std::max(largest, b.end - b.begin);
    try {
      const bool in_place = how.in_place && how.wire == WireDtype::fp32;
      hier_ = std::make_unique<HierarchicalAllreduce>(comm, in_place ? 0 : largest + 1, how.wire,
                                                      how.ranks_per_node, in_place ? count + 1 : 0);
    } catch (const LibraryError& e) {  // thrown on every rank alike (hierarchical.hpp)
      if (!how.fallback_to_flat) throw;
      int rank = 0;
      MPI_Comm_rank(comm, &rank);
      if (rank == 0)
        log_warn("--allreduce auto: summing with MPI_Allreduce, not hierarchically: " +
                 without_error_prefix(e.what()));
    }
  }
  if (!hier_ && how.wire != WireDtype::fp32) {
    wire_ = std::make_unique<WireAllreduce>(comm, how.wire);
  }
  if (!threaded_) return;
  thread_ = std::thread([this, cpu = how.comm_cpu] {
    pthread_setname_np(pthread_self(), "dtrain-comm");  // in top -H, perf, /proc/<pid>/task
    std::string why;
    if (cpu >= 0 && !pin_this_thread({cpu}, &why))
      log_warn("--pin-threads: the communication thread stays unpinned: " + why);
    loop();
    std::lock_guard<std::mutex> lock(mu_);
    exited_ = true;
    cv_.notify_all();
  });
}

BucketedAllreduce::~BucketedAllreduce() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  // A hierarchical sum still polling its node's shared memory (an error unwinds the step),
  // which this object is about to unmap, is cancelled: it returns within ~10 ms.
  if (hier_) hier_->cancel();
  if (!stuck_) {
    thread_.join();
    return;
  }
  // finish() gave up on the thread. Inside a blocking MPI call with a stuck peer
  // (MPI_Allreduce, or the node leaders' sum between nodes) it never returns, and MPI_Abort
  // follows: left behind, with the shared memory it may still touch (hier_) not unmapped.
  std::unique_lock<std::mutex> lock(mu_);
  if (cv_.wait_for(lock, std::chrono::seconds(2), [&] { return exited_; })) {
    lock.unlock();
    thread_.join();
    return;
  }
  lock.unlock();
  thread_.detach();
  (void)hier_.release();
}

float* BucketedAllreduce::home() const { return hier_ ? hier_->home() : nullptr; }

void BucketedAllreduce::begin(float* data, float flag) {
  DT_ASSERT(home() == nullptr || data == home(),
            "BucketedAllreduce: summing in place, begin() takes home()");
  data_ = data;
  data_[count_] = flag;
  launched_ = 0;
  std::lock_guard<std::mutex> lock(mu_);
  done_ = 0;
}

void BucketedAllreduce::ready(std::size_t from) {
  if (!overlap_) return;
  hand_over(from);
}

void BucketedAllreduce::hand_over(std::size_t from) {
  const std::size_t before = launched_;
  while (launched_ < buckets_.size() && buckets_[launched_].begin >= from) ++launched_;
  if (launched_ == before) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (std::size_t k = before; k < launched_; ++k) queue_.push_back(k);
  }
  cv_.notify_one();
}

void BucketedAllreduce::reduce(std::size_t k, int track) {
  const Bucket& b = buckets_[k];
  // The first bucket (ending at count_) also carries the flag in the spare float after them.
  const std::size_t n = b.end - b.begin + (k == 0 ? 1 : 0);
  if (hier_ || wire_) {
    // The thread's sums are watched by finish()'s wait; the thread-less path waits itself.
    const TimelineSpan span("allreduce bucket", "exchange", track);
    const std::string what = "gradient allreduce of bucket " + std::to_string(k + 1) + "/" +
                             std::to_string(buckets_.size()) + " over the workers";
    const double timeout = threaded_ ? comm_timeout() : timeout_s_;
    if (hier_) hier_->sum(data_ + b.begin, n, threaded_, timeout, what);
    else wire_->sum(data_ + b.begin, n, threaded_, timeout, what);
  } else if (threaded_) {
    const TimelineSpan span("allreduce bucket", "exchange", track);
    DT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, data_ + b.begin, static_cast<int>(n), MPI_FLOAT,
                               MPI_SUM, comm_));
  } else {  // no second thread may call MPI: the slower non-blocking algorithm, with a deadline
    MPI_Request req = MPI_REQUEST_NULL;
    DT_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, data_ + b.begin, static_cast<int>(n), MPI_FLOAT,
                                MPI_SUM, comm_, &req));
    wait_one(req, timeout_s_,
             "gradient allreduce of bucket " + std::to_string(k + 1) + "/" +
                 std::to_string(buckets_.size()) + " over the workers");
  }
}

void BucketedAllreduce::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    // Idle, it wakes every 0.1 s to watch the caller's inline reductions (finish()).
    cv_.wait_for(lock, std::chrono::milliseconds(100), [&] { return stop_ || !queue_.empty(); });
    if (stop_) return;
    if (queue_.empty()) {
      if (watch_until_ > 0 && now_seconds() > watch_until_) {
        // The caller is blocked in MPI_Allreduce past the deadline: no peer will come. Report
        // like any timeout and end the job (MPI_Abort is allowed from any thread).
        const std::string msg = timeout_error(watch_bucket_, watch_timeout_).what();
        lock.unlock();
        log_error(msg);
        MPI_Abort(MPI_COMM_WORLD, kExitFault);
        return;
      }
      continue;
    }
    const std::size_t k = queue_.front();
    queue_.pop_front();
    const bool failed = error_ != nullptr;  // a step whose sum failed: its other buckets too
    lock.unlock();
    std::exception_ptr error;
    try {
      if (!failed) reduce(k, Timeline::kCommTrack);
    } catch (...) {
      error = std::current_exception();
    }
    lock.lock();
    if (error && !error_) error_ = error;
    ++done_;
    cv_.notify_all();
  }
}

BucketedOutcome BucketedAllreduce::finish(double timeout_s) {
  const double t0 = now_seconds();
  BucketedOutcome out;
  if (!threaded_) {
    timeout_s_ = timeout_s;
    launched_ = buckets_.size();
    for (std::size_t k = 0; k < buckets_.size(); ++k) reduce(k, 0);
  } else {
    // First the buckets already handed over (the thread sums them in order) ...
    {
      std::unique_lock<std::mutex> lock(mu_);
      // Hierarchical sums keep their own deadline in shared memory and name the late workers:
      // this wait gives them a second more.
      const auto deadline = std::chrono::steady_clock::now() +
                            std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                std::chrono::duration<double>(timeout_s + (hier_ ? 1.0 : 0.0)));
      // A failed bucket (a hierarchical sum naming the late worker) ends the wait at once.
      if (!cv_.wait_until(lock, deadline, [&] { return done_ == launched_ || error_; })) {
        stuck_ = true;
        throw timeout_error(done_, timeout_s);
      }
      if (error_) std::rethrow_exception(error_);
    }
    // ... then the rest on this thread, which would only wait for them anyway: no hand-over
    // latency (a thread wake-up costs more than a 1 MiB bucket's margin). The idle
    // communication thread watches the deadline meanwhile.
    for (std::size_t k = launched_; k < buckets_.size(); ++k) {
      {
        std::lock_guard<std::mutex> lock(mu_);
        // (Hierarchical: a second more, as above.)
        watch_until_ = now_seconds() + timeout_s + (hier_ ? 1.0 : 0.0);
        watch_timeout_ = timeout_s;
        watch_bucket_ = k;
      }
      reduce(k, 0);
    }
    launched_ = buckets_.size();
    std::lock_guard<std::mutex> lock(mu_);
    watch_until_ = 0;
  }
  out.flag = data_[count_];
  out.wait_seconds = now_seconds() - t0;
  return out;
}

TimeoutError BucketedAllreduce::timeout_error(std::size_t k, double timeout_s) const {
  int size = 0;
  MPI_Comm_size(comm_, &size);
  const Bucket& b = buckets_[k];
  return TimeoutError(timeout_s, "gradient allreduce of bucket " + std::to_string(k + 1) + "/" +
                                     std::to_string(buckets_.size()) + " (" +
                                     std::to_string((b.end - b.begin) * sizeof(float)) +
                                     " bytes) over the " + std::to_string(size) + " workers");
}

}  // namespace dtrain
