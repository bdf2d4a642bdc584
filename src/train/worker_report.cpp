// dtrain/train/worker_report.cpp — the worker's reports: the chief's progress line and
// metrics.csv row every --log-every steps, and at the end every worker's step times and step
// anatomy (data wait, forward + backward, exposed communication, optimizer) gathered to the chief.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "worker.hpp"

namespace dtrain {
namespace {

/// "42s", "3m07s", "2h05m": a duration for the progress line.
std::string format_duration(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  char b[32];
  if (s < 60) std::snprintf(b, sizeof b, "%llds", s);
  else if (s < 3600) std::snprintf(b, sizeof b, "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(b, sizeof b, "%lldh%02lldm", s / 3600, (s % 3600) / 60);
  return b;
}

}  // namespace

void Worker::log_interval(int epoch) {
  exchange_->settle(model_);  // no log line from a step whose gradient turns out non-finite
  float host[kStatsFloats] = {};
  be_.copy_to_host(host, stats_.data(), sizeof host);
  be_.fill(stats_.data(), 0.0f, kStatsFloats);
  const double now = now_seconds(), span = std::max(now - t_log_, 1e-9);
  // The chief's own steps' time: the interval without its evaluations and checkpoints.
  const double dt = std::max(span - log_paused_, 1e-9);
  // The time in which the interval's global samples were trained: the same where every worker
  // paused with the chief (in_step()); else the whole interval, the others having trained on.
  const double dt_all = in_step() ? dt : span;
  // samples/s of all workers: exact with allreduce; ps modes: from the global steps (estimate).
  const double sps = static_cast<double>(log_samples_global_) / dt_all;
  // An interval in which this worker trained on no sample (every image of its batches bad, or
  // a shard that ran out) has no loss: its line says so, and no metrics row (a loss of 0 would
  // read as a perfect fit) is written.
  const bool measured = log_samples_local_ > 0;
  const double loss = measured ? host[0] / log_samples_local_ : 0.0;
  const double acc = measured ? host[1] / log_samples_local_ : 0.0;
  const double top5 = measured ? host[2] / log_samples_local_ : 0.0;
  if (measured) {
    out_.train_loss = loss;
    out_.train_accuracy = acc;
    out_.train_measured = true;
  }
  if (reports_) {
    const double lr =
        learning_rate(c_, std::max<std::int64_t>(global_step_ - 1, 0), plan_.total_steps);
    const double wall = prior_wall_ + now - t_start_;
    const double staleness = pushes_ ? staleness_sum_ / pushes_ : 0.0;
    const double per_step = log_steps_ ? 1e3 / static_cast<double>(log_steps_) : 0.0;
    const double ms_per_step = per_step * dt;
    const double exposed_ms = per_step * (exchange_seconds_ - log_exchange_start_);
    log_info(
        progress_line(epoch, measured, loss, acc, ms_per_step, sps, lr, wall, dt_all, staleness));
    if (measured)
      metrics_->write({"train", global_step_, epoch + 1, wall, loss, acc, sps, lr, staleness,
                       ms_per_step, exposed_ms, top5});
  }
  start_log_interval(now);
}

void Worker::start_log_interval(double now) {
  t_log_ = now;
  log_paused_ = 0;
  log_global_start_ = global_step_;
  log_exchange_start_ = exchange_seconds_;
  log_steps_ = log_samples_local_ = log_samples_global_ = 0;
}

bool Worker::in_step() const {
  if (exchange_->lockstep()) return true;
  return exchange_kind(c_) == ExchangeKind::ps_sync &&
         (c_.replicas_to_aggregate <= 0 || c_.replicas_to_aggregate >= plan_.workers);
}

std::string Worker::progress_line(int epoch, bool measured, double loss, double acc,
                                  double ms_per_step, double sps, double lr, double wall, double dt,
                                  double staleness) const {
  // Progress: share of the run's global steps done, and the time left at this interval's rate
  // of global steps (training only: evaluations and checkpoints come on top).
  const double total = static_cast<double>(std::max<std::int64_t>(plan_.total_steps, 1));
  const double done = std::min(1.0, static_cast<double>(global_step_) / total);
  const double rate = static_cast<double>(global_step_ - log_global_start_) / dt;
  const double eta = rate > 0 ? (total - static_cast<double>(global_step_)) / rate : 0.0;
  char fit[64] = "loss      - | acc      -";  // no sample trained on in this interval
  if (measured) std::snprintf(fit, sizeof fit, "loss %.4f | acc %.4f", loss, acc);
  char line[320];
  int len = std::snprintf(line, sizeof line,
                          "step %7lld | epoch %3d | %s | %8.1f ms/step | "
                          "%9.1f samples/s | lr %.5f | %7.1f s | %5.1f%% | ETA %s",
                          static_cast<long long>(global_step_), epoch + 1, fit, ms_per_step, sps,
                          lr, wall, 100.0 * done, format_duration(std::max(eta, 0.0)).c_str());
  if (!exchange_->lockstep() && len > 0 && len < static_cast<int>(sizeof line))
    std::snprintf(line + len, sizeof line - len, " | staleness %.2f", staleness);
  return line;
}

std::vector<double> Worker::own_step_times() const {
  std::vector<double> mine = {0, 0, 0, 0, 0, 0, 0, -1, -1, -1, -1, -1, 0};
  if (step_ms_.empty()) return mine;
  std::vector<float> t = step_ms_;
  auto at = [&](double q) {
    auto k = static_cast<std::ptrdiff_t>(q * static_cast<double>(t.size() - 1) + 0.5);
    std::nth_element(t.begin(), t.begin() + k, t.end());
    return static_cast<double>(t[k]);
  };
  mine[0] = at(0.5);
  mine[1] = at(0.9);
  mine[2] = *std::max_element(step_ms_.begin(), step_ms_.end());
  const double per_step = 1e3 / static_cast<double>(step_ms_.size());
  mine[3] = data_seconds_ * per_step;
  mine[4] = compute_seconds_ * per_step;
  mine[5] = exchange_seconds_ * per_step;
  mine[6] = optimizer_seconds_ * per_step;
  // The samples the run used (a backup worker's dropped gradients are not) over the steps' time.
  if (train_seconds_ > 0) mine[12] = static_cast<double>(applied_samples_) / train_seconds_;
  if (step_ms_.size() >= 2) {  // the same after this process's first step
    const double after = 1e3 / static_cast<double>(step_ms_.size() - 1);
    mine[7] = (data_seconds_ - first_[1]) * after;
    mine[8] = (compute_seconds_ - first_[2]) * after;
    mine[9] = (exchange_seconds_ - first_[3]) * after;
    mine[10] = (optimizer_seconds_ - first_[4]) * after;
    if (train_seconds_ > first_[0])
      mine[11] = static_cast<double>(applied_samples_ - first_applied_samples_) /
                 (train_seconds_ - first_[0]);
  }
  return mine;
}

void Worker::summarize_step_times() {
  // Per worker: p50 / p90 / max of the step times (data + compute + exchange), and the step's
  // anatomy (means per step of data wait, forward + backward, exposed communication, optimizer),
  // gathered to the chief.
  const std::vector<double> mine = own_step_times();
  const int K = static_cast<int>(mine.size());
  std::vector<double> all(cluster_.is_chief() ? K * plan_.workers : 0);
  MPI_Request req;
  DT_CHECK_MPI(MPI_Igather(mine.data(), K, MPI_DOUBLE, all.data(), K, MPI_DOUBLE, 0,
                           cluster_.role_comm(), &req));
  wait_one(req, comm_timeout(), "gathering step times");
  // A pipeline: the stage leaders (replica 0) send their stage's rows on to the chief (the last
  // stage's), stage by stage, so that every stage's workers are reported.
  const int stages = pipe_ != nullptr ? pipe_->place().stages : 1;
  if (stages > 1 && cluster_.is_chief()) {
    std::vector<double> whole(reports_ ? all.size() * static_cast<std::size_t>(stages) : 0);
    DT_CHECK_MPI(MPI_Igather(all.data(), static_cast<int>(all.size()), MPI_DOUBLE, whole.data(),
                             static_cast<int>(all.size()), MPI_DOUBLE, stages - 1, pipe_->pipe(),
                             &req));
    wait_one(req, comm_timeout(), "pipeline: gathering the stages' step times");
    if (reports_) all = std::move(whole);
  }
  if (!reports_ || train_seconds_ <= 0) return;  // no step trained in this session: no times
  std::string line = "# step time ms p50/p90/max per worker:";
  std::string anatomy =
      "# step anatomy ms/step per worker (data | compute | exposed comm | optimizer):";
  const int D = plan_.workers, n = D * stages;
  double workers_rate = 0;  // the sum of the workers' own rates (the last stage's)
  for (int w = 0; w < n; ++w) {
    const double* a = &all[static_cast<std::size_t>(K * w)];
    char name[32], b[112];
    if (stages > 1) std::snprintf(name, sizeof name, "s%d.r%d", w / D, w % D);
    else std::snprintf(name, sizeof name, "w%d", w);
    std::snprintf(b, sizeof b, " %s %.1f/%.1f/%.1f", name, a[0], a[1], a[2]);
    line += b;
    std::snprintf(b, sizeof b, " %s %.2f | %.2f | %.2f | %.2f", name, a[3], a[4], a[5], a[6]);
    anatomy += b;
    out_.step_ms_p50 = std::max(out_.step_ms_p50, a[0]);
    out_.step_ms_p90 = std::max(out_.step_ms_p90, a[1]);
    out_.step_ms_max = std::max(out_.step_ms_max, a[2]);
    for (int k = 0; k < 4; ++k) out_.anatomy_ms[k] += a[3 + k] / n;
    out_.compute_ms_per_worker.push_back(a[4]);
    out_.exposed_ms_per_worker.push_back(a[5]);
    out_.compute_ms_per_worker_after_first.push_back(a[8]);
    out_.exposed_ms_per_worker_after_first.push_back(a[9]);
    // Without each worker's first step: only when every worker had a second one (a[7], a[11] ≥ 0).
    out_.has_after_first = (w == 0 || out_.has_after_first) && a[7] >= 0 && a[11] >= 0;
    for (int k = 0; k < 4; ++k) out_.anatomy_after_first_ms[k] += a[7 + k] / n;
    // Every stage trains the same samples: the run's rate is one stage's replicas' (the last's).
    if (w / D == stages - 1) {
      out_.samples_per_sec_after_first += a[11];
      workers_rate += a[12];
    }
  }
  // Workers in step share the chief's step time; else the chief's time alone would count the
  // samples the others trained while it evaluated, checkpointed or waited at an epoch's end.
  out_.samples_per_sec =
      in_step() ? static_cast<double>(out_.samples) / train_seconds_ : workers_rate;
  log_info(line);
  log_info(anatomy);
}

}  // namespace dtrain
