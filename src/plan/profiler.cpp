// plan/profiler.cpp — one worker's per-layer step times and optimizer time (plan/profiler.hpp).
#include "dtrain/plan/profiler.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <random>

#include "dtrain/core/error.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/model/model.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/train/trainer.hpp"

namespace dtrain {
namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n == 0 ? 0 : n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

/// The job's sample shape and class count: --synthetic, or the training file's.
DatasetInfo input_of(const Config& c) {
  if (!c.synthetic.empty()) return parse_synthetic(c.synthetic);
  DatasetInfo info = open_dataset_info(c.train_data, c.num_classes);
  DT_REQUIRE(!info.encoded, "dtrain plan: --train-data '" + c.train_data +
                                "' holds encoded images; profile the model with --synthetic "
                                "CxHxW:classes (the decoded crop's shape) instead");
  return info;
}

/// The layers' names and parameter ranges (floats of the flat buffer, line order).
std::vector<LayerCost> layer_table(const Model& model) {
  std::vector<LayerCost> out;
  const std::vector<LayerInfo> layers = model.layers();
  for (std::size_t i = 0; i < layers.size(); ++i)
    out.push_back({layer_key(i, layers[i].type, layers[i].name), 0, 0, 0, 0});
  for (const TensorInfo& t : model.param_tensors()) {
    LayerCost& l = out.at(std::stoul(t.name.substr(0, t.name.find('.'))));
    if (l.param_floats == 0) l.param_offset = t.offset;
    l.param_floats += t.count;
  }
  return out;
}

/// Per-step samples of every layer's forward and backward ms, of the step and of the optimizer.
struct Samples {
  std::vector<std::vector<double>> forward, backward;  // [layer][step]
  std::vector<double> step, optimizer;
};

/// Runs 1 + steps train steps, recording the timed ones into `s`.
void run_steps(Model& model, Backend& be, const Config& c, int batch, int steps, Samples& s) {
  const std::size_t L = model.layers().size();
  s.forward.assign(L, {});
  s.backward.assign(L, {});
  std::vector<float> host_x(static_cast<std::size_t>(batch) * model.sample_shape().count());
  std::mt19937 rng(static_cast<std::mt19937::result_type>(c.seed));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (float& v : host_x) v = normal(rng);
  std::vector<std::int32_t> host_y(static_cast<std::size_t>(batch));
  for (int i = 0; i < batch; ++i) host_y[i] = i % model.num_classes();
  DeviceBuffer<float> x(be, host_x.size()), stats(be, kStatsFloats);
  DeviceBuffer<std::int32_t> y(be, host_y.size());
  be.copy_to_device(x.data(), host_x.data(), host_x.size() * sizeof(float));
  be.copy_to_device(y.data(), host_y.data(), host_y.size() * sizeof(std::int32_t));
  Optimizer opt(c, be, model.param_count(), 1 + steps, {},
                param_segments(model.param_tensors(), model.param_count()));
  std::vector<double> fwd(L), bwd(L);
  Clock::time_point last;
  model.set_layer_probe([&](std::size_t i, bool backward) {
    be.synchronize();
    (backward ? bwd : fwd)[i] += ms_since(last);
    last = Clock::now();
  });
  for (int k = 0; k <= steps; ++k) {
    std::fill(fwd.begin(), fwd.end(), 0.0);
    std::fill(bwd.begin(), bwd.end(), 0.0);
    const Clock::time_point start = Clock::now();
    last = start;
    model.train_step(x.data(), y.data(), batch, 1.0f / batch, c.seed + k, stats.data());
    be.synchronize();
    const double step_ms = ms_since(start);
    const Clock::time_point o = Clock::now();
    opt.apply(model.params(), model.grads(), k);
    be.synchronize();
    if (k == 0) continue;  // warm-up
    s.step.push_back(step_ms);
    s.optimizer.push_back(ms_since(o));
    for (std::size_t i = 0; i < L; ++i) {
      s.forward[i].push_back(fwd[i]);
      s.backward[i].push_back(bwd[i]);
    }
  }
  model.set_layer_probe({});
}

}  // namespace

std::vector<LayerInfo> job_layers(const Config& c) {
  const DatasetInfo input = input_of(c);
  return Model(c.layers, input.sample, input.num_classes, 1, act_dtype_of(c.precision)).layers();
}

WorkerProfile profile_worker(const Config& c, const Cluster& cluster, int batch, int steps) {
  DT_REQUIRE(steps >= 1, "option --plan-steps: must be >= 1, got " + std::to_string(steps));
  const DatasetInfo input = input_of(c);
  set_threads(c, cluster);
  std::string device;
  std::unique_ptr<Backend> be = make_backend(c, cluster, device);
  Model model(*be, c.layers, input.sample, input.num_classes, batch);
  model.initialize(c.seed);
  Samples s;
  run_steps(model, *be, c, batch, steps, s);
  WorkerProfile p;
  p.job = c.config_file;
  p.batch = batch;
  p.device = device;
  p.threads = omp_get_max_threads();
  p.precision = to_string(c.precision);
  p.steps = steps;
  p.step_ms = median(s.step);
  p.optimizer_ms = median(s.optimizer);
  p.layers = layer_table(model);
  double sum = 0;
  for (std::size_t i = 0; i < p.layers.size(); ++i) {
    p.layers[i].forward_ms = median(s.forward[i]);
    p.layers[i].backward_ms = median(s.backward[i]);
    sum += p.layers[i].forward_ms + p.layers[i].backward_ms;
  }
  for (LayerCost& l : p.layers) {  // the layers' split, the median step's total
    l.forward_ms *= sum > 0 ? p.step_ms / sum : 0;
    l.backward_ms *= sum > 0 ? p.step_ms / sum : 0;
  }
  return p;
}

}  // namespace dtrain
