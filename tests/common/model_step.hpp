// tests/common/model_step.hpp — one training step of a Model with everything it produces copied to
// the host, for tests that compare two models (layouts, precisions, backends) on the same batch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "dtrain/model/model.hpp"

namespace dtrain::test {

/// What StepRun::run() reads back, all fp32 on the host.
struct StepOutputs {
  std::vector<float> loss;    ///< the training step's stats: Σ loss, #correct, #top-5 hits
  std::vector<float> grads;   ///< param_count() parameter gradients
  std::vector<float> state;   ///< state_count() floats after the step (running statistics)
  std::vector<float> eval;    ///< evaluate()'s stats on the same batch after the step
  std::vector<float> logits;  ///< n × classes logits (logits()) after the step
};

/// On m's backend: one train_step on the batch (x: n×C×H×W fp32 NCHW on the host, labels: n;
/// grad_scale 1/n, dropout seed 9), then evaluate() and logits() on the same batch.
StepOutputs run_step(Model& m, const std::vector<float>& x,
                     const std::vector<std::int32_t>& labels);
/// The same on a batch already on the device, x in m.input_form(), the training step in
/// `micro_batches` slices (Model::train_step_micro; 1: train_step).
StepOutputs run_step_on(Model& m, const void* x, const std::vector<std::int32_t>& labels,
                        int micro_batches);

/// Model::network_input's sequence on `be` for the fp32 NCHW batch x of shape s: converted to
/// NHWC where `to` is nhwc and the layouts differ (convert_layout), then cast to t — the bytes
/// (s.count() elements of t) the first layer reads, which Backend::normalize_uint8 writes in one
/// pass.
std::vector<std::byte> network_form(Backend& be, const std::vector<float>& x, const Shape& s,
                                    Layout to, DType t);

/// ‖a − b‖∞ / max(‖b‖∞, 1e-30): the largest difference relative to b's largest magnitude.
double max_rel(const std::vector<float>& a, const std::vector<float>& b);

}  // namespace dtrain::test
