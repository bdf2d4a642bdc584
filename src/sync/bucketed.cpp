// dtrain/sync/bucketed.cpp — bucketed gradient allreduce on a communication thread (see
// sync/bucketed.hpp for the design and its measurements).
#include "dtrain/sync/bucketed.hpp"

#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/timeline.hpp"

namespace dtrain {

std::vector<Bucket> plan_buckets(std::size_t count, std::size_t bucket_floats) {
  if (bucket_floats == 0 || bucket_floats >= count) return {Bucket{0, count}};
  std::vector<Bucket> out;
  for (std::size_t end = count; end > 0;) {
    const std::size_t begin = end > bucket_floats ? end - bucket_floats : 0;
    out.push_back({begin, end});
    end = begin;
  }
  return out;
}

namespace {
/// True when every value is finite: no value has an all-ones exponent (±Inf, NaN). An integer OR
/// reduction, which the compiler vectorizes (a float sum may not be reordered).
bool all_finite(const float* p, std::size_t n) {
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t u = 0;
    std::memcpy(&u, p + i, sizeof u);
    bad |= static_cast<std::uint32_t>((u & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}
}  // namespace

BucketedAllreduce::BucketedAllreduce(MPI_Comm comm, std::size_t count, std::size_t bucket_floats,
                                     bool overlap)
    : comm_(comm), count_(count), buckets_(plan_buckets(count, bucket_floats)) {
  for (const Bucket& b : buckets_)
    DT_REQUIRE(b.end - b.begin < static_cast<std::size_t>(INT_MAX),
               "--bucket-mb: a bucket of " + std::to_string(b.end - b.begin) +
                   " floats exceeds MPI's count limit; choose a smaller --bucket-mb");
  int level = MPI_THREAD_SINGLE;
  DT_CHECK_MPI(MPI_Query_thread(&level));
  threaded_ = level >= MPI_THREAD_SERIALIZED;
  overlap_ = overlap && threaded_;
  if (threaded_) thread_ = std::thread([this] { loop(); });
}

BucketedAllreduce::~BucketedAllreduce() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (stuck_) thread_.detach();  // inside MPI_Allreduce with a dead peer; MPI_Abort follows
  else thread_.join();
}

void BucketedAllreduce::begin(float* data, float flag) {
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

void BucketedAllreduce::reduce(std::size_t k) {
  const Bucket& b = buckets_[k];
  // The first bucket also carries the flag in the spare float after the gradients.
  const std::size_t n = b.end - b.begin + (k == 0 ? 1 : 0);
  if (threaded_) {
    const TimelineSpan span("allreduce bucket", "exchange", Timeline::kCommTrack);
    DT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, data_ + b.begin, static_cast<int>(n), MPI_FLOAT,
                               MPI_SUM, comm_));
  } else {  // no thread may call MPI: the slower non-blocking algorithm, waited with a deadline
    MPI_Request req = MPI_REQUEST_NULL;
    DT_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, data_ + b.begin, static_cast<int>(n), MPI_FLOAT,
                                MPI_SUM, comm_, &req));
    wait_one(req, timeout_s_, "gradient allreduce of bucket " + std::to_string(k + 1) + "/" +
                                  std::to_string(buckets_.size()) + " over the workers");
  }
  std::lock_guard<std::mutex> lock(mu_);
  ++done_;
}

void BucketedAllreduce::loop() {
  for (;;) {
    std::size_t k = 0;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      k = queue_.front();
      queue_.pop_front();
    }
    try {
      reduce(k);
    } catch (const std::exception& e) {
      std::lock_guard<std::mutex> lock(mu_);
      if (error_.empty()) error_ = e.what();
      ++done_;
    }
    cv_.notify_all();
  }
}

BucketedOutcome BucketedAllreduce::finish(double timeout_s) {
  const double t0 = now_seconds();
  BucketedOutcome out;
  if (!threaded_) {
    timeout_s_ = timeout_s;
    launched_ = buckets_.size();
    for (std::size_t k = 0; k < buckets_.size(); ++k) {
      reduce(k);
      out.finite = out.finite && all_finite(data_ + buckets_[k].begin, buckets_[k].end - buckets_[k].begin);
    }
  } else {
    hand_over(0);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeout_s));
    // Scan each summed bucket for non-finite values while the thread reduces the next one.
    for (std::size_t k = 0; k < buckets_.size(); ++k) {
      {
        std::unique_lock<std::mutex> lock(mu_);
        if (!cv_.wait_until(lock, deadline, [&] { return done_ > k; })) {
          stuck_ = true;
          throw RuntimeFault(timeout_message(k, timeout_s));
        }
        if (!error_.empty()) throw LibraryError(error_);
      }
      out.finite = out.finite && all_finite(data_ + buckets_[k].begin, buckets_[k].end - buckets_[k].begin);
    }
  }
  out.flag = data_[count_];
  out.wait_seconds = now_seconds() - t0;
  return out;
}

std::string BucketedAllreduce::timeout_message(std::size_t k, double timeout_s) const {
  int size = 0;
  MPI_Comm_size(comm_, &size);
  char secs[32];
  std::snprintf(secs, sizeof secs, "%g", timeout_s);
  const Bucket& b = buckets_[k];
  return error_prefix() + "timed out after " + secs + " s waiting in: gradient allreduce of bucket " +
         std::to_string(k + 1) + "/" + std::to_string(buckets_.size()) + " (" +
         std::to_string((b.end - b.begin) * sizeof(float)) + " bytes) over the " +
         std::to_string(size) + " workers (a peer rank is stuck or died; see --timeout)";
}

}  // namespace dtrain
