// src/dnn/onednn/dense_loss.cpp — the CPU backend's dense (oneDNN inner product), dropout and
// softmax cross-entropy ops.
//
// Dense follows the oneDNN 2.6 C++ API (inner_product_forward / backward_data / backward_weights,
// layouts nc and oi). Dropout is inverted dropout (Srivastava et al. 2014) with the mask drawn
// from counter_uniform(seed, i), the same stream the CUDA backend uses, so masks are identical.
// Softmax cross-entropy is a plain loop with the log-sum-exp shift for numerical stability, with
// optional label smoothing.
#include <algorithm>
#include <cmath>

#include "dtrain/core/error.hpp"
#include "dtrain/dnn/counter_rng.hpp"
#include "onednn_common.hpp"

namespace dtrain::onednn {
namespace {

using dnnl::memory;
using dnnl::prop_kind;

class OneDnnDense final : public DenseOp {
 public:
  /// t: the activations' type; with bf16, built() is false where oneDNN has only a reference
  /// bf16 kernel.
  OneDnnDense(const Context& ctx, const DenseDesc& d, DType t) {
    const std::string shape = "x " + std::to_string(d.batch) + "x" + std::to_string(d.inputs) +
                              ", W " + std::to_string(d.outputs) + "x" + std::to_string(d.inputs);
    DT_REQUIRE(d.batch >= 1 && d.inputs >= 1 && d.outputs >= 1,
               "dense: batch, inputs and outputs must be >= 1, got " + shape);
    built_ = build_op("inner_product", shape, t, [&] { return build(ctx, d, t, shape); });
  }
  [[nodiscard]] bool built() const { return built_; }

  void forward(const void* x, const float* w, const float* b, void* y) override {
    p_.forward(x, w, b, y);
  }

  void backward(const void* x, const float* w, const void* dy, void* dx, float* dw,
                float* db) override {
    p_.backward(x, w, dy, dx, dw, db);
  }

 private:
  // Activations in nc; the weights in oi, read by the primitives in oi (fp32) or as a bf16 copy
  // in oneDNN's layout (bf16: the staged reorder rounds them); their gradient is fp32, written in
  // oi (fp32) or in oneDNN's layout and reordered to oi (bf16: its brgemm kernels' choice).
  bool build(const Context& ctx, const DenseDesc& d, DType t, const std::string& shape) {
    const memory::desc src = md_nc(d.batch, d.inputs, t);
    const memory::desc dst = md_nc(d.batch, d.outputs, t);
    const memory::desc wei({d.outputs, d.inputs}, memory::data_type::f32, memory::format_tag::oi);
    const memory::desc wei_t = t == DType::f32 ? wei : md_any(wei, t);
    const memory::desc bias = md_x(static_cast<std::size_t>(d.outputs));
    const dnnl::primitive_attr attr = user_scratchpad_attr();

    const dnnl::inner_product_forward::desc fd(prop_kind::forward_training, src, wei_t, bias, dst);
    const dnnl::inner_product_forward::primitive_desc fpd(fd, attr, ctx.engine);
    const dnnl::inner_product_backward_data::desc bdd(src, wei_t, dst);
    const dnnl::inner_product_backward_data::primitive_desc bdpd(bdd, attr, ctx.engine, fpd);
    const memory::desc dwei = t == DType::f32 ? wei : md_any(wei, DType::f32);
    const dnnl::inner_product_backward_weights::desc bwd(src, dwei, bias, dst);
    const dnnl::inner_product_backward_weights::primitive_desc bwpd(bwd, attr, ctx.engine, fpd);
    if (avoided_reference(t == DType::bf16, fpd, bdpd, bwpd)) return false;

    p_.fwd = Prim::make<dnnl::inner_product_forward>(ctx, fpd, "inner_product_forward", shape);
    p_.fwd.user_arg(DNNL_ARG_SRC, src);
    p_.fwd.staged_arg(DNNL_ARG_WEIGHTS, wei, fpd.weights_desc(), false);
    p_.fwd.user_arg(DNNL_ARG_BIAS, bias);
    p_.fwd.user_arg(DNNL_ARG_DST, dst);

    p_.bwd_data = Prim::make<dnnl::inner_product_backward_data>(
        ctx, bdpd, "inner_product_backward_data", shape);
    p_.bwd_data.user_arg(DNNL_ARG_DIFF_DST, dst);
    p_.bwd_data.staged_arg(DNNL_ARG_WEIGHTS, wei, bdpd.weights_desc(), false);
    p_.bwd_data.user_arg(DNNL_ARG_DIFF_SRC, src);

    p_.bwd_weights = Prim::make<dnnl::inner_product_backward_weights>(
        ctx, bwpd, "inner_product_backward_weights", shape);
    p_.bwd_weights.user_arg(DNNL_ARG_SRC, src);
    p_.bwd_weights.user_arg(DNNL_ARG_DIFF_DST, dst);
    p_.bwd_weights.staged_arg(DNNL_ARG_DIFF_WEIGHTS, wei, bwpd.diff_weights_desc(), true);
    p_.bwd_weights.user_arg(DNNL_ARG_DIFF_BIAS, bias);
    return true;
  }

  WeightedPrims p_;
  bool built_ = false;
};

class CpuDropout final : public DropoutOp {
 public:
  CpuDropout(const Shape& shape, float p) : p_(p), mask_(shape.count()) {
    DT_REQUIRE(p >= 0.0f && p < 1.0f, "dropout: rate must be in [0, 1), got " + std::to_string(p));
    DT_REQUIRE(shape.count() > 0, "dropout: empty shape " + shape.str());
  }

  /// Training: mask[i] = (counter_uniform(seed, i) < p) ? 0 : 1/(1−p); y = x·mask.
  /// Inference: y = x (the mask is left as it was).
  void forward(const void* xv, void* yv, bool training, std::uint64_t seed) override {
    const auto* x = static_cast<const float*>(xv);
    auto* y = static_cast<float*>(yv);
    const std::size_t n = mask_.size();
    if (!training) {
      if (x != y) std::copy(x, x + n, y);
      return;
    }
    const float keep_scale = 1.0f / (1.0f - p_);
    float* __restrict mask = mask_.data();
    for (std::size_t i = 0; i < n; ++i) {
      mask[i] = counter_uniform(seed, i) < p_ ? 0.0f : keep_scale;
    }
    for (std::size_t i = 0; i < n; ++i) y[i] = x[i] * mask[i];
  }

  /// dx = dy · mask of the last training forward.
  void backward(const void* dyv, void* dxv) override {
    const auto* dy = static_cast<const float*>(dyv);
    auto* dx = static_cast<float*>(dxv);
    const float* __restrict mask = mask_.data();
    for (std::size_t i = 0; i < mask_.size(); ++i) dx[i] = dy[i] * mask[i];
  }

 private:
  float p_;
  HostArray mask_;
};

class CpuSoftmaxXent final : public SoftmaxXentOp {
 public:
  CpuSoftmaxXent(int batch, int classes, float smoothing)
      : batch_(batch), classes_(classes), smoothing_(smoothing) {
    check_softmax_xent(batch, classes, smoothing);
  }

  void forward_backward(const void* logits_v, const std::int32_t* labels, int n, float grad_scale,
                        void* dlogits_v, float* stats) override {
    const auto* logits = static_cast<const float*>(logits_v);
    auto* dlogits = static_cast<float*>(dlogits_v);
    DT_REQUIRE(n >= 0 && n <= batch_, "softmax cross-entropy: n = " + std::to_string(n) +
                                          " outside [0, " + std::to_string(batch_) + "]");
    const std::size_t k = static_cast<std::size_t>(classes_);
    double loss_sum = 0.0;
    int correct = 0, top5 = 0;
    for (int s = 0; s < n; ++s) {
      const float* l = logits + static_cast<std::size_t>(s) * k;
      const std::int32_t label = labels[s];
      DT_REQUIRE(label >= 0 && label < classes_,
                 "softmax cross-entropy: label " + std::to_string(label) + " of sample " +
                     std::to_string(s) + " outside [0, " + std::to_string(classes_) + ")");
      std::size_t argmax = 0;
      for (std::size_t j = 1; j < k; ++j) {
        if (l[j] > l[argmax]) argmax = j;
      }
      const float mx = l[argmax];
      double sum = 0.0;
      for (std::size_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(l[j] - mx));
      const double lse = static_cast<double>(mx) + std::log(sum);
      if (smoothing_ > 0.0) {  // −Σ q_j log p_j with q = (1 − ε)·onehot + ε/K
        double sum_l = 0.0;
        for (std::size_t j = 0; j < k; ++j) sum_l += static_cast<double>(l[j]);
        loss_sum += lse - (1.0 - smoothing_) * static_cast<double>(l[label]) -
                    smoothing_ / static_cast<double>(k) * sum_l;
      } else {
        loss_sum += lse - static_cast<double>(l[label]);
      }
      correct += argmax == static_cast<std::size_t>(label) ? 1 : 0;
      top5 += classes_ranked_before(l, classes_, label) < kTopK ? 1 : 0;
      if (dlogits != nullptr) {
        float* d = dlogits + static_cast<std::size_t>(s) * k;
        const double inv_sum = 1.0 / sum;
        const double off = smoothing_ / static_cast<double>(k), on = 1.0 - smoothing_ + off;
        for (std::size_t j = 0; j < k; ++j) {  // ε = 0: on = 1, off = 0 exactly
          const double prob = std::exp(static_cast<double>(l[j] - mx)) * inv_sum;
          d[j] = static_cast<float>((prob - (j == static_cast<std::size_t>(label) ? on : off)) *
                                    grad_scale);
        }
      }
    }
    stats[0] += static_cast<float>(loss_sum);
    stats[1] += static_cast<float>(correct);
    stats[2] += static_cast<float>(top5);
  }

 private:
  int batch_;
  int classes_;
  double smoothing_;  ///< label smoothing ε
};

}  // namespace

std::unique_ptr<DenseOp> make_dense_op(const Context& ctx, const DenseDesc& d, DType t) {
  return if_built<DenseOp>(std::make_unique<OneDnnDense>(ctx, d, t));
}

std::unique_ptr<DropoutOp> make_dropout_op(const Shape& shape, float p) {
  return std::make_unique<CpuDropout>(shape, p);
}

std::unique_ptr<SoftmaxXentOp> make_softmax_xent_op(int batch, int classes, float label_smoothing) {
  return std::make_unique<CpuSoftmaxXent>(batch, classes, label_smoothing);
}

}  // namespace dtrain::onednn
