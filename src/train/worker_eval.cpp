// dtrain/train/worker_eval.cpp — evaluation on the test set: at epoch ends and every
// --eval-every steps, with the workers' mean batchnorm statistics (all workers together in the
// lock-step modes, the chief alone in async ones), and the --target-accuracy note.
#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <thread>
#include <utility>
#include <vector>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/fault.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/timeline.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/train/signals.hpp"
#include "worker.hpp"

namespace dtrain {

void Worker::average_model_state() {
  const std::size_t S = model_.state_count();
  if (S == 0 || plan_.workers == 1) return;
  // Gather every worker's row and average with mean_of_rows(), the function `dtrain predict`
  // applies to a checkpoint's rows: the same bits evaluate here and there.
  std::vector<float> mine(S), rows(S * plan_.workers);
  be_.copy_to_host(mine.data(), model_.state(), S * sizeof(float));
  MPI_Request req;
  DT_CHECK_MPI(MPI_Iallgather(mine.data(), static_cast<int>(S), MPI_FLOAT, rows.data(),
                              static_cast<int>(S), MPI_FLOAT, cluster_.role_comm(), &req));
  wait_one(req, comm_timeout(), "batchnorm statistics allgather");
  const std::vector<float> mean = mean_of_rows(rows.data(), plan_.workers, S);
  be_.copy_to_device(model_.state(), mean.data(), S * sizeof(float));
}

void Worker::evaluate_between(int epoch) {
  const bool lockstep = exchange_->lockstep();
  if (!lockstep && !cluster_.is_chief()) return;  // the chief evaluates alone (below)
  const double t0 = now_seconds();
  if (lockstep) {
    // Every worker is at the same step. Evaluate with the workers' mean batchnorm statistics, as
    // at epoch ends, then give each worker its own back: evaluating never changes the training
    // state, so a run with --eval-every trains bit for bit as one without.
    const std::size_t S = model_.state_count();
    std::vector<float> own(S);
    if (S) be_.copy_to_host(own.data(), model_.state(), S * sizeof(float));
    average_model_state();
    evaluate(epoch, false);
    if (S) be_.copy_to_device(model_.state(), own.data(), S * sizeof(float));
  } else {
    // ps workers need not stand at the same step, and one that ends its epoch (or the run) without
    // seeing the crossing would leave the others waiting in an evaluation collective while it waits
    // in the epoch-end one. So no collective: the chief evaluates the whole test set alone, on the
    // parameters of its last push-pull and its own batchnorm statistics, and the other workers
    // train on (tf.estimator's separate evaluator, inside the chief).
    evaluate(epoch, false, true);
  }
  log_paused_ += now_seconds() - t0;  // no step time of the chief's (log_interval())
}

void Worker::note_target(double accuracy, std::int64_t step, double wall) {
  if (c_.target_accuracy <= 0 || out_.step_at_accuracy >= 0 || accuracy < c_.target_accuracy)
    return;
  // To the millisecond, as metrics.csv's wall_seconds, from which a resumed run recalls it: the
  // same value whether or not the run was resumed.
  out_.time_to_accuracy = std::round(wall * 1e3) / 1e3;
  out_.step_at_accuracy = step;
  char line[160];
  std::snprintf(line, sizeof line,
                "# target accuracy %.4f reached: %.4f at global_step %lld after %.1f s",
                c_.target_accuracy, accuracy, static_cast<long long>(step), wall);
  log_info(line);
}

void Worker::evaluate_batch(int n) {
  if (runner_) return runner_->evaluate(x_.data(), y_.data(), n, stats_.data());
  for (int a = 0; a < n; a += model_.max_batch()) {  // in micro-batches (--micro-batches)
    const int rows = std::min(model_.max_batch(), n - a);
    model_.evaluate(model_.input_at(x_.data(), a), y_.data() + a, rows, stats_.data());
  }
}

void Worker::evaluate(int epoch, bool epoch_end, bool alone) {
  exchange_->settle(model_);
  if (!plan_.has_test) return;
  const TimelineSpan span("evaluation", "evaluation");
  HostBatch batch;
  float zero[kStatsFloats] = {}, sums[kStatsFloats];
  float saved[kStatsFloats];
  be_.copy_to_host(saved, stats_.data(), sizeof saved);  // keep the training interval's sums
  be_.copy_to_device(stats_.data(), zero, sizeof zero);
  double count = 0;
  bool interrupted = false;
  if (plan_.synthetic) {  // the test set is this worker's synthetic batch
    const auto n = static_cast<int>(shard_size(plan_.test.num_samples, w_, plan_.workers));
    evaluate_batch(n);
    count = n;
  } else {
    auto indices = alone
                       ? epoch_shard(plan_.test.num_samples, c_.seed, 0, 0, 1, false)
                       : epoch_shard(plan_.test.num_samples, c_.seed, 0, w_, plan_.workers, false);
    if (!test_upload_) test_upload_.emplace(be_, plan_.test, plan_.batch, model_.input_layout());
    BatchReader reader(plan_.test, std::move(indices), plan_.batch, 2, 0, {}, 0, nullptr,
                       test_upload_->uint8_batches());
    // A stop signal (a preemption, a time limit) during a long evaluation leaves it off: the
    // checkpoint must be written before the scheduler's SIGKILL. Not in a pipeline, whose stages
    // go through the test set together.
    for (;;) {
      interrupted = runner_ == nullptr && stop_requested();
      if (interrupted || !reader.next(batch)) break;
      upload(*test_upload_, batch);
      evaluate_batch(batch.n);
      if (fault_active(FaultKind::slow_eval))  // test-only (DTRAIN_FAULT)
        std::this_thread::sleep_for(std::chrono::milliseconds(200));
      count += batch.n;
    }
    out_.bad_images += reader.bad_images();
  }
  be_.copy_to_host(sums, stats_.data(), sizeof sums);
  be_.copy_to_device(stats_.data(), saved, sizeof saved);
  double v[5] = {sums[0], sums[1], sums[2], count, interrupted ? 1.0 : 0.0};
  if (!alone) worker_sum(cluster_.role_comm(), v, 5);
  if (v[4] > 0) {  // no result: the run stops (worker.cpp) and evaluates again when resumed
    stop_signal_ = true;
    if (reports_)
      log_info("# evaluation at global_step " + std::to_string(global_step_) +
               " left off: stopping on a signal");
    return;
  }
  out_.test_loss = v[0] / v[3];
  out_.test_accuracy = v[1] / v[3];
  out_.test_top5 = v[2] / v[3];
  out_.test_measured = true;
  if (reports_) {
    const double wall = prior_wall_ + now_seconds() - t_start_;
    char line[200];
    std::snprintf(line, sizeof line,
                  "epoch %3d %s | global_step %lld | test loss %.4f | test accuracy %.4f | "
                  "top-5 %.4f | %lld samples | %.1f s",
                  epoch + 1, epoch_end ? "done" : "eval", static_cast<long long>(global_step_),
                  out_.test_loss, out_.test_accuracy, out_.test_top5, static_cast<long long>(v[3]),
                  wall);
    // A resumed run's evaluation of the checkpoint's step is in metrics.csv already.
    const bool recorded = global_step_ == recorded_eval_step_;
    log_info(line + std::string(recorded ? " (recorded before the resume)" : ""));
    if (recorded) return;
    metrics_->write({"test", global_step_, epoch + 1, wall, out_.test_loss, out_.test_accuracy, 0,
                     0, 0, 0, 0, out_.test_top5});
    note_target(out_.test_accuracy, global_step_, wall);
  }
}

}  // namespace dtrain
