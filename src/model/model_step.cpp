// dtrain/model/model_step.cpp — running the model (see model.hpp): the network's input in the
// backend's layout and dtype, forward, loss and backward over one stack of layers (whole batches
// or micro-batches), gradients announced final bucket by bucket, evaluation and logits.
#include <algorithm>

#include "dtrain/core/error.hpp"
#include "dtrain/core/timeline.hpp"
#include "dtrain/dnn/counter_rng.hpp"
#include "dtrain/model/model.hpp"
#include "dtrain/model/step_graphs.hpp"
#include "memory_plan.hpp"
#include "model_stack.hpp"

namespace dtrain {

bool Model::prepare_input() {
  if (input_form_ == InputForm::network || part_.first != 0) return false;
  Backend& be = backend();
  const bool convert = be.differs_from_nchw(sample_);
  const bool cast = be.act_dtype() != DType::f32;
  if (!convert && !cast) return false;  // fp32 NCHW: the first layer reads x itself
  if (input_.size() != 0) return true;  // never freed: a captured step may read it
  const std::size_t batch_count = sample_.with_n(max_batch_).count();
  input_ = DeviceBuffer<std::byte>(be, batch_count * act_size_ * static_cast<std::size_t>(slots_));
  if (convert && cast) input_f32_ = DeviceBuffer<float>(be, batch_count);
  return true;
}

const void* Model::network_input(const void* x, int n) {
  if (!prepare_input()) return x;
  Backend& be = backend();
  const Shape s = sample_.with_n(n);
  const DType t = be.act_dtype();
  std::byte* dst =  // this slot's copy: micro-batches in flight each keep their input
      input_.data() +
      static_cast<std::size_t>(slot_) * sample_.with_n(max_batch_).count() * act_size_;
  if (t == DType::f32) {
    be.convert_layout(x, dst, s, Layout::nhwc, t);
  } else if (!be.differs_from_nchw(s)) {
    be.cast(x, DType::f32, dst, t, s.count());
  } else {  // convert in fp32, then round
    be.convert_layout(x, input_f32_.data(), s, Layout::nhwc, DType::f32);
    be.cast(input_f32_.data(), DType::f32, dst, t, s.count());
  }
  return dst;
}

void* Model::act(int tensor, const void* x) const {
  if (tensor == 0) return const_cast<void*>(x);  // the network input is read only
  return at(plan_->act[static_cast<std::size_t>(tensor)]);
}

void* Model::at(std::size_t offset) const {
  return arena_.data() + static_cast<std::size_t>(slot_) * activation_bytes_ + offset * act_size_;
}

void Model::run_forward(Stack& s, const void* x, const StepContext& ctx) {
  std::vector<const void*> in;
  for (std::size_t i = part_.first; i <= part_.last; ++i) {
    if (absorbed_[i]) {  // its host layer applied it
      if (probe_) probe_(i, false);
      continue;
    }
    in.clear();
    for (int t : run_inputs_[i]) in.push_back(act(t, x));
    StepContext lc = ctx;
    lc.seed = mix_seed(ctx.seed, i);
    lc.salt = i;
    s.layers[i]->forward(in, act(static_cast<int>(i) + 1, x), lc);
    if (backend().debug_sync())
      backend().check_after("forward of layer " + std::to_string(i + 1) + " (" +
                            s.layers[i]->type() + ")");
    if (probe_) probe_(i, false);
  }
}

void Model::train_step(const void* x, const std::int32_t* labels, int n, float grad_scale,
                       std::uint64_t step_seed, float* stats, const GradsFinal& on_final) {
  if (n == 0) {
    backend().fill(grads_.data(), 0.0f, param_count_);
    if (on_final) on_final(0);
    return;
  }
  Stack& s = stack_for(n);  // made (ops, workspace) outside any capture
  // Dropout reads the seed from the device on CUDA, whether the step is replayed or not.
  const std::uint64_t* seed_word = backend().set_step_seed(step_seed);
  // Allocated here, before any capture: the body's network_input() then only finds them.
  prepare_input();
  const auto body = [&] {
    const void* input = network_input(x, n);
    {
      const TimelineSpan span("forward", "compute");  // with the loss and its gradient
      run_forward(s, input, StepContext{true, step_seed, seed_word});
      run_loss(s, input, labels, n, grad_scale, stats, true);
    }
    run_backward(s, input, on_final);
  };
  if (!graphs_) return body();
  if (on_final) return graphs_->run_eagerly("the exchange takes gradients during backward", body);
  if (probe_) return graphs_->run_eagerly("per-layer timing", body);
  if (backend().debug_sync()) return graphs_->run_eagerly("--debug-sync", body);
  const StepGraphKey key{
      n, grad_scale, x, labels, stats, slot_, backend().buffers_generation(), input_form_};
  const std::string label = sample_.with_n(n).str() + " " + dtype_name(backend().act_dtype());
  const TimelineSpan span("step graph", "compute");
  graphs_->run(key, label, body);
}

void Model::set_step_graphs(std::unique_ptr<StepGraphs> graphs) { graphs_ = std::move(graphs); }

void Model::run_loss(Stack& s, const void* input, const std::int32_t* labels, int n,
                     float grad_scale, float* stats, bool training) {
  const std::size_t L = s.layers.size();
  s.loss->forward_backward(act(static_cast<int>(L), input), labels, n, training ? grad_scale : 0,
                           training ? at(plan_->grad[L]) : nullptr, stats);
}

void Model::run_backward(Stack& s, const void* input, const GradsFinal& on_final) {
  Backend& be = backend();
  const TimelineSpan span("backward", "compute");
  std::vector<const void*> in;
  std::vector<void*> din;
  for (std::size_t i = part_.last + 1; i-- > part_.first;) {
    if (absorbed_[i]) {  // its host layer reads the shared gradient and output itself
      if (probe_) probe_(i, true);
      if (on_final) on_final(grads_final_from_[i]);
      continue;
    }
    const PlanStep& step = plan_->backward[i];
    in.clear();
    din.clear();
    for (std::size_t k = 0; k < run_inputs_[i].size(); ++k) {
      in.push_back(act(run_inputs_[i][k], input));
      din.push_back(step.dx[k] == kNoSlot ? nullptr : at(step.dx[k]));
    }
    const auto y = static_cast<int>(i) + 1;
    s.layers[i]->backward(in, act(y, input), at(plan_->grad[static_cast<std::size_t>(y)]), din);
    if (be.debug_sync())
      be.check_after("backward of layer " + std::to_string(i + 1) + " (" + s.layers[i]->type() +
                     ")");
    for (std::size_t k = 0; k < run_inputs_[i].size(); ++k) {
      if (!step.accumulate[k]) continue;
      const auto t = static_cast<std::size_t>(run_inputs_[i][k]);
      const std::size_t count = s.layers[i]->input_shapes()[k].count();
      be.add(at(plan_->grad[t]), din[k], count, be.act_dtype());
    }
    if (probe_) probe_(i, true);
    if (on_final) on_final(grads_final_from_[i]);
  }
}

void Model::train_step_micro(const void* x, const std::int32_t* labels, int n, int micro_batches,
                             float grad_scale, std::uint64_t step_seed, float* stats,
                             const GradsFinal& on_final) {
  const int M = std::max(1, std::min(micro_batches, n));
  if (M == 1) return train_step(x, labels, n, grad_scale, step_seed, stats, on_final);
  Backend& be = backend();
  for (int m = 0; m < M; ++m) {
    const int a = static_cast<int>(static_cast<std::int64_t>(n) * m / M);
    const int b = static_cast<int>(static_cast<std::int64_t>(n) * (m + 1) / M);
    const auto seed = micro_batch_seed(step_seed, m, M);
    const void* xm = input_at(x, a);
    if (m + 1 < M) {  // M ≤ n: every slice holds a sample
      train_step(xm, labels + a, b - a, grad_scale, seed, stats);
      accumulate_micro(m, M);
      continue;
    }
    // The last slice: each range its backward finishes gets the earlier slices' sum, then the
    // caller hears of it (a bucket may leave at once).
    std::size_t done = param_count_;
    train_step(xm, labels + a, b - a, grad_scale, seed, stats, [&](std::size_t from) {
      if (from < done) {
        be.add(grads_.data() + from, grad_sum_.data() + from, done - from, DType::f32);
        done = from;
      }
      if (on_final) on_final(from);
    });
  }
}

void Model::evaluate(const void* x, const std::int32_t* labels, int n, float* stats) {
  if (n == 0) return;
  Stack& s = stack_for(n);
  const void* input = network_input(x, n);
  run_forward(s, input, StepContext{false, 0});
  s.loss->forward_backward(act(static_cast<int>(s.layers.size()), input), labels, n, 0.0f, nullptr,
                           stats);
}

void Model::logits(const void* x, int n, float* host_logits) {
  if (n == 0) return;
  Stack& s = stack_for(n);
  const void* input = network_input(x, n);
  run_forward(s, input, StepContext{false, 0});
  Backend& be = backend();
  const std::size_t count = static_cast<std::size_t>(n) * num_classes_;
  const void* out = act(static_cast<int>(s.layers.size()), input);
  if (be.act_dtype() != DType::f32) {
    be.cast(out, be.act_dtype(), logits_f32_.data(), DType::f32, count);
    out = logits_f32_.data();
  }
  be.copy_to_host(host_logits, out, count * sizeof(float));
}

}  // namespace dtrain
