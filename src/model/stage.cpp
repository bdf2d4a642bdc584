// src/model/stage.cpp — a Model built for a LayerRange: one pipeline stage's crossings, its
// micro-batch forward and backward in activation slots, and gradient accumulation (model.hpp).
#include <algorithm>

#include "dtrain/core/error.hpp"
#include "dtrain/core/timeline.hpp"
#include "dtrain/dnn/counter_rng.hpp"
#include "dtrain/model/model.hpp"
#include "memory_plan.hpp"
#include "model_stack.hpp"

namespace dtrain {

std::uint64_t micro_batch_seed(std::uint64_t step_seed, int m, int micro_batches) {
  if (micro_batches <= 1) return step_seed;  // Model::train_step()'s own key
  return mix_seed(step_seed, 0x6d6963726fULL + static_cast<std::uint64_t>(m));
}

void Model::find_crossings() {
  const std::size_t L = specs_.size();
  std::vector<bool> received(L + 1, false), sent(L + 1, false);
  for (std::size_t i = 0; i < L; ++i)
    for (int u : inputs_[i]) {
      const auto t = static_cast<std::size_t>(u);
      if (t == 0 && part_.first > 0 && inside(i))
        throw InputError("model: layer #" + std::to_string(i + 1) + " '" + specs_[i].text +
                         "' reads the network input but runs in a pipeline stage after the "
                         "first (layers " +
                         std::to_string(part_.first + 1) + ".." + std::to_string(part_.last + 1) +
                         "): only the first stage reads data");
      if (t == 0) continue;
      // Received: made before this stage, read here or later; sent: made so far, read later.
      if (i >= part_.first && t - 1 < part_.first) received[t] = true;
      if (i > part_.last && t - 1 <= part_.last) sent[t] = true;
    }
  received_.clear();
  sent_.clear();
  for (std::size_t t = 1; t <= L; ++t) {
    if (received[t]) received_.push_back(static_cast<int>(t));
    if (sent[t]) sent_.push_back(static_cast<int>(t));
  }
}

std::size_t Model::tensor_elements(int t, int n) const {
  if (t == 0) return sample_.count() * static_cast<std::size_t>(n);
  const Stack& s = *stacks_.at({max_batch_, 0});
  return s.layers.at(static_cast<std::size_t>(t - 1))->output_shape().with_n(1).count() *
         static_cast<std::size_t>(n);
}

namespace {
void check_crossing(const Model& m, int slot, int t) {
  const auto& r = m.received_tensors();
  const auto& s = m.sent_tensors();
  DT_ASSERT(slot >= 0 && slot < m.slots(),
            "model: activation slot " + std::to_string(slot) + " of " + std::to_string(m.slots()));
  DT_ASSERT(std::find(r.begin(), r.end(), t) != r.end() ||
                std::find(s.begin(), s.end(), t) != s.end(),
            "model: tensor " + std::to_string(t) + " does not cross this stage's cuts");
}
}  // namespace

void* Model::tensor_value(int slot, int t) const {
  check_crossing(*this, slot, t);
  return arena_.data() + static_cast<std::size_t>(slot) * activation_bytes_ +
         plan_->act[static_cast<std::size_t>(t)] * act_size_;
}

void* Model::tensor_grad(int slot, int t) const {
  check_crossing(*this, slot, t);
  return arena_.data() + static_cast<std::size_t>(slot) * activation_bytes_ +
         plan_->grad[static_cast<std::size_t>(t)] * act_size_;
}

void Model::forward_micro(int slot, const void* x, const std::int32_t* labels, int n,
                          float grad_scale, std::uint64_t seed, float* stats, bool training) {
  DT_ASSERT(slot >= 0 && slot < slots_, "model: activation slot out of range");
  if (n == 0) return;
  slot_ = slot;
  Stack& s = stack_for(n);
  if (slot_input_.size() != static_cast<std::size_t>(slots_)) slot_input_.assign(slots_, nullptr);
  const void* input = part_.first == 0 ? network_input(x, n) : nullptr;
  slot_input_[static_cast<std::size_t>(slot)] = input;
  {
    const TimelineSpan span("forward", "compute");
    run_forward(s, input, StepContext{training, seed});
    if (has_loss()) run_loss(s, input, labels, n, grad_scale, stats, training);
  }
  slot_ = 0;
}

void Model::backward_micro(int slot, int n, const GradsFinal& on_final) {
  DT_ASSERT(slot >= 0 && slot < slots_, "model: activation slot out of range");
  if (n == 0) {
    backend().fill(grads_.data(), 0.0f, param_count_);
    if (on_final) on_final(0);
    return;
  }
  slot_ = slot;
  Stack& s = stack_for(n);
  run_backward(s, slot_input_.at(static_cast<std::size_t>(slot)), on_final);
  slot_ = 0;
}

void Model::accumulate_micro(int m, int M) {
  if (M <= 1) return;
  Backend& be = backend();
  if (grad_sum_.size() == 0)
    grad_sum_ = DeviceBuffer<float>(be, std::max<std::size_t>(param_count_, 1));
  if (m == 0) be.copy_device(grad_sum_.data(), grads_.data(), param_count_ * sizeof(float));
  else if (m + 1 < M) be.add(grad_sum_.data(), grads_.data(), param_count_, DType::f32);
  else  // g_{M−1} + Σ: the order train_step_micro() adds in
    be.add(grads_.data(), grad_sum_.data(), param_count_, DType::f32);
}

}  // namespace dtrain
