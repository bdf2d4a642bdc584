// src/dnn/onednn/norm_act.cpp — oneDNN activation (eltwise) and batch-normalization ops of the
// CPU backend.
//
// Follows the oneDNN 2.6 C++ API: eltwise_forward/backward (relu and sigmoid as
// eltwise_relu_use_dst_for_bwd / eltwise_logistic_use_dst_for_bwd, whose backward reads y only, so
// that the model may run them in place), batch_normalization_forward
// (training with use_scale|use_shift, saving the batch mean/variance; inference with
// use_global_stats) and batch_normalization_backward (diff scale/shift). Running statistics are
// updated here with the PyTorch convention: running = (1−m)·running + m·batch, the variance term
// being the unbiased batch variance (Ioffe & Szegedy 2015).
#include "dtrain/core/error.hpp"
#include "onednn_common.hpp"

namespace dtrain::onednn {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;

class OneDnnActivation final : public ActivationOp {
 public:
  /// t: the activations' type; with bf16, built() is false where oneDNN has only a reference
  /// bf16 kernel.
  OneDnnActivation(const Context& ctx, ActKind kind, const Shape& shape, DType t) : kind_(kind) {
    DT_REQUIRE(shape.count() > 0, "activation: empty shape " + shape.str());
    built_ = build_op(kind == ActKind::relu ? "eltwise relu" : "eltwise logistic", shape.str(), t,
                      [&] { return build(ctx, shape.str(), shape.count(), t); });
  }
  [[nodiscard]] bool built() const { return built_; }

  void forward(const void* x, void* y) override {
    fwd_.set(DNNL_ARG_SRC, x);
    fwd_.set(DNNL_ARG_DST, y);
    fwd_.run();
  }

  void backward(const void* x, const void* y, const void* dy, void* dx) override {
    // Both use-dst variants read y, so the forward may run in place (x == y).
    (void)x;
    bwd_.set(DNNL_ARG_DST, y);
    bwd_.set(DNNL_ARG_DIFF_DST, dy);
    bwd_.set(DNNL_ARG_DIFF_SRC, dx);
    bwd_.run();
  }

 private:
  bool build(const Context& ctx, const std::string& shape, std::size_t count, DType t) {
    const memory::desc md = md_x(count, t);
    const algorithm alg = kind_ == ActKind::relu ? algorithm::eltwise_relu_use_dst_for_bwd
                                                 : algorithm::eltwise_logistic_use_dst_for_bwd;
    const dnnl::primitive_attr attr = user_scratchpad_attr();
    const dnnl::eltwise_forward::desc fd(prop_kind::forward_training, alg, md, 0.0f, 0.0f);
    const dnnl::eltwise_forward::primitive_desc fpd(fd, attr, ctx.engine);
    const dnnl::eltwise_backward::desc bd(alg, md, md, 0.0f, 0.0f);
    const dnnl::eltwise_backward::primitive_desc bpd(bd, attr, ctx.engine, fpd);
    if (avoided_reference(t == DType::bf16, fpd, bpd)) return false;
    fwd_ = Prim::make<dnnl::eltwise_forward>(ctx, fpd, "eltwise_forward", shape);
    fwd_.user_arg(DNNL_ARG_SRC, md);
    fwd_.user_arg(DNNL_ARG_DST, md);

    bwd_ = Prim::make<dnnl::eltwise_backward>(ctx, bpd, "eltwise_backward", shape);
    bwd_.user_arg(DNNL_ARG_DST, md);
    bwd_.user_arg(DNNL_ARG_DIFF_DST, md);
    bwd_.user_arg(DNNL_ARG_DIFF_SRC, md);
    return true;
  }

  ActKind kind_;
  Prim fwd_, bwd_;
  bool built_ = false;
};

class OneDnnBatchNorm final : public BatchNormOp {
 public:
  /// t: the activations' type; with bf16, built() is false where oneDNN has only a reference
  /// bf16 kernel.
  OneDnnBatchNorm(const Context& ctx, const BatchNormDesc& d, Layout layout, DType t)
      : ctx_(ctx), d_(d), layout_(layout), t_(t), mean_(static_cast<std::size_t>(d.input.c)),
        var_(static_cast<std::size_t>(d.input.c)),
        unused_shift_(static_cast<std::size_t>(d.input.c)) {
    const Shape& s = d.input;
    DT_REQUIRE(s.n >= 1 && s.c >= 1 && s.h >= 1 && s.w >= 1,
               "batchnorm: input shape must be positive, got " + s.str());
    DT_REQUIRE(d.epsilon > 0.0f,
               "batchnorm: epsilon must be > 0, got " + std::to_string(d.epsilon));
    DT_REQUIRE(d.momentum >= 0.0f && d.momentum <= 1.0f,
               "batchnorm: momentum must be in [0, 1], got " + std::to_string(d.momentum));
    built_ = build_op("batch_normalization", s.str(), t, [&] { return build(s.str()); });
  }
  [[nodiscard]] bool built() const { return built_; }

  void forward(const void* x, const float* gamma, const float* beta, float* running_mean,
               float* running_var, void* y, bool training) override {
    Prim& p = training ? train_ : infer_;
    p.set(DNNL_ARG_SRC, x);
    p.set(DNNL_ARG_SCALE, gamma);
    p.set(DNNL_ARG_SHIFT, beta);
    p.set(DNNL_ARG_DST, y);
    if (!training) {
      p.set(DNNL_ARG_MEAN, running_mean);
      p.set(DNNL_ARG_VARIANCE, running_var);
      p.run();
      return;
    }
    p.run();
    update_running(running_mean, running_var);
  }

  void backward(const void* x, const float* gamma, const void* dy, void* dx, float* dgamma,
                float* dbeta) override {
    if (dx == nullptr) {  // first layer of the net: dx is not wanted but oneDNN must write it
      // floats: room for bf16 too
      if (dx_scratch_.size() == 0) dx_scratch_ = HostArray(d_.input.count());
      dx = dx_scratch_.data();
    }
    bwd_.set(DNNL_ARG_SRC, x);
    bwd_.set(DNNL_ARG_SCALE, gamma);
    bwd_.set(DNNL_ARG_DIFF_DST, dy);
    bwd_.set(DNNL_ARG_DIFF_SRC, dx);
    bwd_.set(DNNL_ARG_DIFF_SCALE, dgamma);
    bwd_.set(DNNL_ARG_DIFF_SHIFT, dbeta);
    bwd_.run();
  }

 private:
  bool build(const std::string& shape) {
    using dnnl::normalization_flags;
    // md: the activations as the model holds them; pmd: as the primitives read and write them.
    // On NCHW activations batchnorm runs in the channel-blocked layout of oneDNN's jit kernel
    // (nChw16c on AVX-512, nChw8c on AVX2), reordered at the op's boundary (Prim::staged_arg):
    // oneDNN's plain-layout kernel for NCHW (ncsp_bnorm) is a plain loop. ResNet-50 NCHW, batch
    // 32, 2 threads, AVX512_BF16 host, alternated runs: fp32 9.8–10.5 → 10.8–11.7 samples/s, bf16
    // (then emulated in fp32) 13.5–13.9 → 16.8–17.9 (native). NHWC is read in place (nspc: jit).
    const memory::desc md = md_act(d_.input, layout_, t_);
    const memory::desc pmd = layout_ == Layout::nchw ? md_blocked(md, t_) : md;
    const memory::desc cmd = md_x(static_cast<std::size_t>(d_.input.c));
    const normalization_flags ss = normalization_flags::use_scale | normalization_flags::use_shift;
    const dnnl::primitive_attr attr = user_scratchpad_attr();
    const memory mean(cmd, ctx_.engine, mean_.data());
    const memory var(cmd, ctx_.engine, var_.data());

    const dnnl::batch_normalization_forward::desc td(prop_kind::forward_training, pmd, d_.epsilon,
                                                     ss);
    const dnnl::batch_normalization_forward::primitive_desc tpd(td, attr, ctx_.engine);
    const dnnl::batch_normalization_forward::desc id(prop_kind::forward_inference, pmd, d_.epsilon,
                                                     ss | normalization_flags::use_global_stats);
    const dnnl::batch_normalization_forward::primitive_desc ipd(id, attr, ctx_.engine);
    const dnnl::batch_normalization_backward::desc bd(prop_kind::backward, pmd, pmd, d_.epsilon,
                                                      ss);
    const dnnl::batch_normalization_backward::primitive_desc bpd(bd, attr, ctx_.engine, tpd);
    if (t_ == DType::bf16 && (slow_bf16(tpd.impl_info_str()) || slow_bf16(ipd.impl_info_str()) ||
                              slow_bf16(bpd.impl_info_str())))
      return false;
    train_ =
        Prim::make<dnnl::batch_normalization_forward>(ctx_, tpd, "bnorm_forward_training", shape);
    declare_io(train_, md, pmd, cmd, DNNL_ARG_SRC, DNNL_ARG_DST);
    train_.user_arg(DNNL_ARG_SHIFT, cmd);
    train_.owned_arg(DNNL_ARG_MEAN, mean);
    train_.owned_arg(DNNL_ARG_VARIANCE, var);

    infer_ =
        Prim::make<dnnl::batch_normalization_forward>(ctx_, ipd, "bnorm_forward_inference", shape);
    declare_io(infer_, md, pmd, cmd, DNNL_ARG_SRC, DNNL_ARG_DST);
    infer_.user_arg(DNNL_ARG_SHIFT, cmd);
    infer_.user_arg(DNNL_ARG_MEAN, cmd);
    infer_.user_arg(DNNL_ARG_VARIANCE, cmd);

    bwd_ = Prim::make<dnnl::batch_normalization_backward>(ctx_, bpd, "bnorm_backward", shape);
    declare_io(bwd_, md, pmd, cmd, DNNL_ARG_DIFF_DST, DNNL_ARG_DIFF_SRC);
    bwd_.staged_arg(DNNL_ARG_SRC, md, pmd, false);
    bwd_.owned_arg(DNNL_ARG_MEAN, mean);
    bwd_.owned_arg(DNNL_ARG_VARIANCE, var);
    // oneDNN 2.6 asks for the shift in backward although dx, dγ, dβ do not depend on it.
    bwd_.owned_arg(DNNL_ARG_SHIFT, memory(cmd, ctx_.engine, unused_shift_.data()));
    bwd_.user_arg(DNNL_ARG_DIFF_SCALE, cmd);
    bwd_.user_arg(DNNL_ARG_DIFF_SHIFT, cmd);
    return true;
  }

  /// A bf16 batchnorm kernel slower than the emulation's fp32 one: a reference kernel, or the
  /// plain-loop kernels "ncsp_bnorm" (plain NCHW, which build() no longer asks for) and
  /// "nspc_bnorm" (NHWC with C not a multiple of the jit kernel's 16 channels), which convert
  /// element by element — ResNet-50 NCHW bf16 on ncsp_bnorm (batch 32, 2 threads, AVX512_BF16):
  /// 63 % of the step, its backward 4× the fp32 kernel's time.
  static bool slow_bf16(const char* impl) {
    const std::string s(impl);
    return is_reference_impl(impl) || s.rfind("ncsp_bnorm", 0) == 0 ||
           s.rfind("nspc_bnorm", 0) == 0;
  }

  /// Declares a data input, a data output (both N×C×H×W, the model's layout md; the primitive's
  /// pmd, reordered when it differs) and the scale (C) of one primitive.
  static void declare_io(Prim& p, const memory::desc& md, const memory::desc& pmd,
                         const memory::desc& cmd, int in, int out) {
    p.staged_arg(in, md, pmd, false);
    p.staged_arg(out, md, pmd, true);
    p.user_arg(DNNL_ARG_SCALE, cmd);
  }

  void update_running(float* __restrict rm, float* __restrict rv) const {
    const std::size_t m = static_cast<std::size_t>(d_.input.n) * d_.input.h * d_.input.w;
    // Unbiased variance; with a single value per channel there is none, so keep the biased one.
    const float unbias = m > 1 ? static_cast<float>(m) / static_cast<float>(m - 1) : 1.0f;
    const float mom = d_.momentum;
    const float* __restrict mean = mean_.data();
    const float* __restrict var = var_.data();
    for (int c = 0; c < d_.input.c; ++c) {
      rm[c] = (1.0f - mom) * rm[c] + mom * mean[c];
      rv[c] = (1.0f - mom) * rv[c] + mom * var[c] * unbias;
    }
  }

  const Context& ctx_;
  BatchNormDesc d_;
  Layout layout_;
  DType t_;
  HostArray mean_, var_;    // batch statistics of the last training forward (biased variance)
  HostArray unused_shift_;  // zeros bound to backward's DNNL_ARG_SHIFT
  HostArray dx_scratch_;    // only for backward(dx == nullptr), made on first use
  Prim train_, infer_, bwd_;
  bool built_ = false;
};

}  // namespace

std::unique_ptr<ActivationOp> make_activation_op(const Context& ctx, ActKind kind,
                                                 const Shape& shape, DType t) {
  return if_built<ActivationOp>(std::make_unique<OneDnnActivation>(ctx, kind, shape, t));
}

std::unique_ptr<BatchNormOp> make_batchnorm_op(const Context& ctx, const BatchNormDesc& d,
                                               Layout layout, DType t) {
  return if_built<BatchNormOp>(std::make_unique<OneDnnBatchNorm>(ctx, d, layout, t));
}

}  // namespace dtrain::onednn
