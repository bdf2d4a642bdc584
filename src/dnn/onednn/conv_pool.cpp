// src/dnn/onednn/conv_pool.cpp — oneDNN convolution and pooling ops of the CPU backend.
//
// Follows the oneDNN 2.6 C++ API: convolution_forward (+bias, + an eltwise_relu post-op when the
// layer's relu is fused into it: ConvOp::enable_relu), convolution_backward_data,
// convolution_backward_weights (weights + bias), pooling_forward / pooling_backward (max keeps its
// workspace between a training forward and backward; avg = pooling_avg_exclude_padding, as
// PyTorch's count_include_pad=False). Convolutions run in the layouts oneDNN prefers (reordered
// from and to the backend's nchw / nhwc and oihw inside the op), except wide ones on nhwc
// activations, which read and write them in place (OneDnnConv::kNxcMinChannels); primitives built
// once per shape.
#include <memory>
#include <string>

#include "dtrain/core/error.hpp"
#include "onednn_common.hpp"

namespace dtrain::onednn {
namespace {

using dnnl::algorithm;
using dnnl::memory;
using dnnl::prop_kind;

std::string window_str(const Shape& in, const Shape& out, const Hw& kernel, const Hw& stride,
                       const Hw& pad) {
  return in.str() + " -> " + out.str() + " kernel " + kernel.str() + " stride " + stride.str() +
         " pad " + pad.str();
}

memory::dims dims_of(const Hw& v) { return {v.h, v.w}; }

class OneDnnConv final : public ConvOp {
 public:
  /// t: the activations' type (f32 | bf16). With bf16, built() is false when oneDNN has no
  /// non-reference bf16 kernel for one of the three primitives.
  OneDnnConv(const Context& ctx, const ConvDesc& d, Layout layout, DType t)
      : ctx_(ctx), d_(d), out_(d.output()), layout_(layout), t_(t),
        shape_(window_str(d.input, out_, d.kernel, d.stride, d.pad)) {
    built_ = build_op("convolution", shape_, t, [&] { return build(); });
  }
  [[nodiscard]] bool built() const { return built_; }

  void forward(const void* x, const float* w, const float* b, void* y) override {
    p_.forward(x, w, b, y);
  }

  void backward(const void* x, const float* w, const void* dy, void* dx, float* dw,
                float* db) override {
    p_.backward(x, w, dy, dx, dw, db);
  }

  /// The relu as the forward primitive's eltwise_relu post-op (oneDNN applies it to each output
  /// value after the bias, before the store); its backward mask is the activation op's
  /// eltwise_relu_use_dst_for_bwd, in place over dy. False where oneDNN would run either with a
  /// reference kernel (or has no bf16 relu on this CPU).
  bool enable_relu() override {
    if (relu_ != nullptr) return true;
    return build_op("convolution + relu", shape_, t_, [&] {
      auto relu = make_activation_op(ctx_, ActKind::relu, out_, t_);
      if (relu == nullptr) return false;
      const Mds m = mds();
      const auto fpd = forward_pd(m, true);
      if (is_reference_impl(fpd.impl_info_str())) return false;
      make_forward(m, fpd);
      relu_ = std::move(relu);
      return true;
    });
  }

  void backward_relu(const void* x, const void* y, const float* w, void* dy, void* dx, float* dw,
                     float* db) override {
    if (relu_ == nullptr) return ConvOp::backward_relu(x, y, w, dy, dx, dw, db);  // throws
    relu_->backward(y, y, dy, dy);  // oneDNN's eltwise backward may run in place
    p_.backward(x, w, dy, dx, dw, db);
  }

 private:
  // Tensors cross the op boundary in plain nchw or nhwc (the backend's layout) and oihw; inside,
  // oneDNN picks its fastest layouts (format_tag::any: blocked nChw8c/16c with jit kernels) and
  // Prim::staged_arg reorders. Exception: with NHWC activations, a convolution of at least
  // kNxcMinChannels input and output channels reads and writes the nhwc tensors themselves
  // (oneDNN's nxc jit / brgemm kernels, as PyTorch's channels_last): no reorder on either side.
  // ResNet-50 (2 threads, batch 32, AVX-512 host, 4 alternated runs): 6,965-7,257 -> 6,004-6,326
  // ms per step. Narrower convolutions keep the blocked route (the Fashion-MNIST CNN's 1->32->64
  // measured no faster in nxc). Should oneDNN offer only a reference kernel for one of an nxc
  // problem's three primitives (forward, backward data, backward weights), the blocked route is
  // taken.
  static constexpr int kNxcMinChannels = 64;

  bool build() {
    const bool wide = layout_ == Layout::nhwc && d_.input.c >= kNxcMinChannels &&
                      d_.out_channels >= kNxcMinChannels;
    nxc_ = wide;
    if (wide && build_route()) return true;
    nxc_ = false;
    return build_route();
  }

  /// Memory descriptors: the tensors as the user passes them (plain layouts) and as the
  /// primitives are asked for them (activations: the user's with nxc_, else format_tag::any).
  struct Mds {
    memory::desc src, dst, wei, bias, wei_t, dwei, asrc, adst;
  };
  [[nodiscard]] Mds mds() const {
    Mds m;
    m.src = md_act(d_.input, layout_, t_);
    m.dst = md_act(out_, layout_, t_);
    const memory::dims wdims{d_.out_channels, d_.input.c, d_.kernel.h, d_.kernel.w};
    m.wei = memory::desc(wdims, memory::data_type::f32, memory::format_tag::oihw);
    m.bias = md_x(static_cast<std::size_t>(d_.out_channels));
    m.wei_t = md_any(m.wei, t_);
    m.dwei = md_any(m.wei, DType::f32);
    m.asrc = nxc_ ? m.src : md_any(m.src, t_);
    m.adst = nxc_ ? m.dst : md_any(m.dst, t_);
    return m;
  }

  /// The forward (training) primitive descriptor; with `relu`, eltwise_relu as a post-op.
  [[nodiscard]] dnnl::convolution_forward::primitive_desc forward_pd(const Mds& m,
                                                                     bool relu) const {
    const auto kind = prop_kind::forward_training;
    const auto alg = algorithm::convolution_direct;
    const memory::dims strides = dims_of(d_.stride), pad = dims_of(d_.pad);
    const auto fd = d_.bias ? dnnl::convolution_forward::desc(kind, alg, m.asrc, m.wei_t, m.bias,
                                                              m.adst, strides, pad, pad)
                            : dnnl::convolution_forward::desc(kind, alg, m.asrc, m.wei_t, m.adst,
                                                              strides, pad, pad);
    dnnl::primitive_attr attr = user_scratchpad_attr();
    if (relu) {
      dnnl::post_ops ops;
      ops.append_eltwise(1.0f, algorithm::eltwise_relu, 0.0f, 0.0f);
      attr.set_post_ops(ops);
    }
    return {fd, attr, ctx_.engine};
  }

  void make_forward(const Mds& m, const dnnl::convolution_forward::primitive_desc& fpd) {
    p_.fwd = Prim::make<dnnl::convolution_forward>(ctx_, fpd, "convolution_forward", shape_);
    p_.fwd.staged_arg(DNNL_ARG_SRC, m.src, fpd.src_desc(), false);
    p_.fwd.staged_arg(DNNL_ARG_WEIGHTS, m.wei, fpd.weights_desc(), false);
    if (d_.bias) p_.fwd.user_arg(DNNL_ARG_BIAS, m.bias);
    p_.fwd.staged_arg(DNNL_ARG_DST, m.dst, fpd.dst_desc(), true);
  }

  /// Builds the three primitives with activations in oneDNN's choice of layout, or (nxc_) in the
  /// backend's nhwc; returns false when a primitive would run a reference kernel where that is
  /// not wanted (nxc, which has the blocked route to fall back on; bf16, which has the
  /// emulation). The weights reach the primitives as bf16 copies under bf16 (the staged reorder
  /// rounds them); their gradient is written in fp32 either way.
  bool build_route() {
    const Mds m = mds();
    const memory::dims strides = dims_of(d_.stride), pad = dims_of(d_.pad);
    const dnnl::primitive_attr attr = user_scratchpad_attr();
    const auto alg = algorithm::convolution_direct;
    p_.bias = d_.bias;

    const auto fpd = forward_pd(m, false);
    const dnnl::convolution_backward_data::desc bdd(alg, m.asrc, m.wei_t, m.adst, strides, pad,
                                                    pad);
    const dnnl::convolution_backward_data::primitive_desc bdpd(bdd, attr, ctx_.engine, fpd);
    const auto bwd = d_.bias ? dnnl::convolution_backward_weights::desc(alg, m.asrc, m.dwei, m.bias,
                                                                        m.adst, strides, pad, pad)
                             : dnnl::convolution_backward_weights::desc(alg, m.asrc, m.dwei, m.adst,
                                                                        strides, pad, pad);
    const dnnl::convolution_backward_weights::primitive_desc bwpd(bwd, attr, ctx_.engine, fpd);
    if (avoided_reference(nxc_ || t_ == DType::bf16, fpd, bdpd, bwpd)) return false;

    make_forward(m, fpd);
    p_.bwd_data = Prim::make<dnnl::convolution_backward_data>(ctx_, bdpd,
                                                              "convolution_backward_data", shape_);
    p_.bwd_data.staged_arg(DNNL_ARG_DIFF_DST, m.dst, bdpd.diff_dst_desc(), false);
    p_.bwd_data.staged_arg(DNNL_ARG_WEIGHTS, m.wei, bdpd.weights_desc(), false);
    p_.bwd_data.staged_arg(DNNL_ARG_DIFF_SRC, m.src, bdpd.diff_src_desc(), true);

    p_.bwd_weights = Prim::make<dnnl::convolution_backward_weights>(
        ctx_, bwpd, "convolution_backward_weights", shape_);
    p_.bwd_weights.staged_arg(DNNL_ARG_SRC, m.src, bwpd.src_desc(), false);
    p_.bwd_weights.staged_arg(DNNL_ARG_DIFF_DST, m.dst, bwpd.diff_dst_desc(), false);
    p_.bwd_weights.staged_arg(DNNL_ARG_DIFF_WEIGHTS, m.wei, bwpd.diff_weights_desc(), true);
    if (d_.bias) p_.bwd_weights.user_arg(DNNL_ARG_DIFF_BIAS, m.bias);
    return true;
  }

  const Context& ctx_;
  ConvDesc d_;
  Shape out_;
  Layout layout_;
  DType t_;
  std::string shape_;  ///< "in -> out kernel .. stride .. pad ..", for errors
  bool nxc_ = false;   ///< activations in the user's nhwc (see kNxcMinChannels)
  WeightedPrims p_;
  std::unique_ptr<ActivationOp> relu_;  ///< enable_relu(): the relu's backward (y-based mask)
  bool built_ = false;
};

class OneDnnPool final : public PoolOp {
 public:
  /// t: the activations' type; with bf16, built() is false where oneDNN has only a reference
  /// bf16 kernel.
  OneDnnPool(const Context& ctx, const PoolDesc& d, Layout layout, DType t) : out_(d.output()) {
    const std::string shape = window_str(d.input, out_, d.kernel, d.stride, d.pad);
    built_ = build_op(d.kind == PoolKind::max ? "max pooling" : "avg pooling", shape, t,
                      [&] { return build(ctx, d, layout, t, shape); });
  }
  [[nodiscard]] bool built() const { return built_; }

  // One forward_training primitive serves both modes: for max pooling it also writes the
  // workspace (cheap), so a later backward always finds what it needs.
  void forward(const void* x, void* y, bool /*training*/) override {
    fwd_.set(DNNL_ARG_SRC, x);
    fwd_.set(DNNL_ARG_DST, y);
    fwd_.run();
  }

  void backward(const void* /*x*/, const void* /*y*/, const void* dy, void* dx) override {
    bwd_.set(DNNL_ARG_DIFF_DST, dy);
    bwd_.set(DNNL_ARG_DIFF_SRC, dx);
    bwd_.run();
  }

 private:
  // oneDNN's jit pooling needs a channel-blocked source (nChw8c on AVX2, nChw16c on AVX-512); the
  // plain-nchw fallback (simple_nchw) is several times slower. The op therefore pools in the
  // blocked layout and reorders at its boundary (Prim::staged_arg).
  bool build(const Context& ctx, const PoolDesc& d, Layout layout, DType t,
             const std::string& shape) {
    const memory::desc src = md_act(d.input, layout, t);
    const memory::desc dst = md_act(out_, layout, t);
    const memory::desc bsrc = md_blocked(src, t), bdst = md_blocked(dst, t);
    const memory::dims strides = dims_of(d.stride);
    const memory::dims kernel = dims_of(d.kernel);
    const memory::dims pad = dims_of(d.pad);
    const algorithm alg =
        d.kind == PoolKind::max ? algorithm::pooling_max : algorithm::pooling_avg_exclude_padding;
    const dnnl::primitive_attr attr = user_scratchpad_attr();

    const dnnl::pooling_forward::desc fd(prop_kind::forward_training, alg, bsrc, bdst, strides,
                                         kernel, pad, pad);
    const dnnl::pooling_forward::primitive_desc fpd(fd, attr, ctx.engine);
    const dnnl::pooling_backward::desc bd(alg, bsrc, bdst, strides, kernel, pad, pad);
    const dnnl::pooling_backward::primitive_desc bpd(bd, attr, ctx.engine, fpd);
    if (avoided_reference(t == DType::bf16, fpd, bpd)) return false;
    fwd_ = Prim::make<dnnl::pooling_forward>(ctx, fpd, "pooling_forward", shape);
    fwd_.staged_arg(DNNL_ARG_SRC, src, fpd.src_desc(), false);
    fwd_.staged_arg(DNNL_ARG_DST, dst, fpd.dst_desc(), true);

    bwd_ = Prim::make<dnnl::pooling_backward>(ctx, bpd, "pooling_backward", shape);
    bwd_.staged_arg(DNNL_ARG_DIFF_DST, dst, bpd.diff_dst_desc(), false);
    bwd_.staged_arg(DNNL_ARG_DIFF_SRC, src, bpd.diff_src_desc(), true);

    const memory::desc ws = fpd.workspace_desc();
    if (ws.get_size() > 0) {
      const memory workspace(ws, ctx.engine);  // allocated once, shared by fwd and bwd
      fwd_.owned_arg(DNNL_ARG_WORKSPACE, workspace);
      bwd_.owned_arg(DNNL_ARG_WORKSPACE, workspace);
    }
    return true;
  }

  Shape out_;
  Prim fwd_, bwd_;
  bool built_ = false;
};

}  // namespace

std::unique_ptr<ConvOp> make_conv_op(const Context& ctx, const ConvDesc& d, Layout layout,
                                     DType t) {
  return if_built<ConvOp>(std::make_unique<OneDnnConv>(ctx, d, layout, t));
}

std::unique_ptr<PoolOp> make_pool_op(const Context& ctx, const PoolDesc& d, Layout layout,
                                     DType t) {
  return if_built<PoolOp>(std::make_unique<OneDnnPool>(ctx, d, layout, t));
}

}  // namespace dtrain::onednn
