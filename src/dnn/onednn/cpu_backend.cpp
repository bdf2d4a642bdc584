// src/dnn/onednn/cpu_backend.cpp — the oneDNN CPU Backend: memory, elementwise utilities,
// op factories and the optimizer update, plus the shared helpers of onednn_common.hpp.
//
// Follows the oneDNN 2.6 C++ API (one dnnl::engine(cpu) + one in-order dnnl::stream per backend).
// Memory is 64-byte aligned host memory (std::aligned_alloc). Optimizer formulas follow
// torch.optim.SGD (momentum/Nesterov, coupled weight decay) and Adam (Kingma & Ba 2015, bias
// corrected), written as branch-free loops over __restrict pointers so that they vectorize.
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <type_traits>

#include "dtrain/core/error.hpp"
#include "dtrain/core/simd.hpp"
#include "dtrain/dnn/bf16.hpp"
#include "../bf16_emulation.hpp"
#include "onednn_common.hpp"

namespace dtrain::onednn {

[[noreturn]] void throw_dnnl(const std::string& what, const std::string& shape,
                             const dnnl::error& e) {
  throw LibraryError(format_error("oneDNN " + what + (shape.empty() ? "" : " [" + shape + "]") +
                                      ": " + e.what() + " (status " +
                                      std::to_string(static_cast<int>(e.status)) + ")",
                                  __FILE__, __LINE__));
}

dnnl::memory::data_type dnnl_type(DType t) {
  return t == DType::bf16 ? dnnl::memory::data_type::bf16 : dnnl::memory::data_type::f32;
}
dnnl::memory::desc md_act(const Shape& s, Layout layout, DType t) {
  return {{s.n, s.c, s.h, s.w},
          dnnl_type(t),
          layout == Layout::nhwc ? dnnl::memory::format_tag::nhwc : dnnl::memory::format_tag::nchw};
}
dnnl::memory::desc md_nc(int n, int c, DType t) {
  return {{n, c}, dnnl_type(t), dnnl::memory::format_tag::nc};
}
dnnl::memory::desc md_any(const dnnl::memory::desc& md, DType t) {
  return {md.dims(), dnnl_type(t), dnnl::memory::format_tag::any};
}
bool is_reference_impl(const char* impl) {
  const std::string s(impl);
  return s.rfind("ref", 0) == 0 || s.find("_ref") != std::string::npos;
}
dnnl::memory::desc md_x(std::size_t n, DType t) {
  return {{static_cast<dnnl::memory::dim>(n)}, dnnl_type(t), dnnl::memory::format_tag::x};
}
dnnl::memory::desc md_blocked(const dnnl::memory::desc& md, DType t) {
  const bool avx512 = dnnl::get_effective_cpu_isa() >= dnnl::cpu_isa::avx512_core;
  return {md.dims(), dnnl_type(t),
          avx512 ? dnnl::memory::format_tag::nChw16c : dnnl::memory::format_tag::nChw8c};
}

dnnl::primitive_attr user_scratchpad_attr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

void Prim::user_arg(int arg, const dnnl::memory::desc& md) {
  args_[arg] = dnnl::memory(md, ctx_->engine, DNNL_MEMORY_NONE);
}

char* Arena::reserve(std::size_t bytes) {
  if (bytes > size_) {
    const std::size_t rounded = (bytes + 4095) / 4096 * 4096;
    p_.reset();  // free first: the peak is the new size, not old + new
    void* p = std::aligned_alloc(64, rounded);
    if (!p)
      throw LibraryError(format_error("out of host memory growing the oneDNN scratch arena to " +
                                          std::to_string(rounded) + " bytes",
                                      __FILE__, __LINE__));
    p_.reset(static_cast<char*>(p));
    size_ = rounded;
  }
  return p_.get();
}

void Prim::transient(int arg, const dnnl::memory::desc& md) {
  args_[arg] = dnnl::memory(md, ctx_->engine, DNNL_MEMORY_NONE);
  transient_.emplace_back(arg, transient_bytes_);
  transient_bytes_ += (md.get_size() + 63) / 64 * 64;
}

void Prim::staged_arg(int arg, const dnnl::memory::desc& user_md, const dnnl::memory::desc& prim_md,
                      bool is_output) {
  if (user_md == prim_md) {
    user_arg(arg, user_md);
    return;
  }
  Staged s;
  s.user = dnnl::memory(user_md, ctx_->engine, DNNL_MEMORY_NONE);
  transient(arg, prim_md);
  s.reorder =
      is_output ? dnnl::reorder(args_.at(arg), s.user) : dnnl::reorder(s.user, args_.at(arg));
  s.is_output = is_output;
  staged_[arg] = std::move(s);
}

void Prim::run() {
  dnnl_guard(what_, shape_, [&] {
    if (transient_bytes_ > 0) {
      char* base = ctx_->scratch.reserve(transient_bytes_);
      for (const auto& [arg, offset] : transient_) args_.at(arg).set_data_handle(base + offset);
    }
    for (auto& [arg, s] : staged_)
      if (!s.is_output) s.reorder.execute(ctx_->stream, s.user, args_.at(arg));
    prim_.execute(ctx_->stream, args_);
    for (auto& [arg, s] : staged_)
      if (s.is_output) s.reorder.execute(ctx_->stream, args_.at(arg), s.user);
    ctx_->stream.wait();
  });
}

void WeightedPrims::forward(const void* x, const float* w, const float* b, void* y) {
  fwd.set(DNNL_ARG_SRC, x);
  fwd.set(DNNL_ARG_WEIGHTS, w);
  if (bias) fwd.set(DNNL_ARG_BIAS, b);
  fwd.set(DNNL_ARG_DST, y);
  fwd.run();
}

void WeightedPrims::backward(const void* x, const float* w, const void* dy, void* dx, float* dw,
                             float* db) {
  if (dx != nullptr) {
    bwd_data.set(DNNL_ARG_DIFF_DST, dy);
    bwd_data.set(DNNL_ARG_WEIGHTS, w);
    bwd_data.set(DNNL_ARG_DIFF_SRC, dx);
    bwd_data.run();
  }
  bwd_weights.set(DNNL_ARG_SRC, x);
  bwd_weights.set(DNNL_ARG_DIFF_DST, dy);
  bwd_weights.set(DNNL_ARG_DIFF_WEIGHTS, dw);
  if (bias) bwd_weights.set(DNNL_ARG_DIFF_BIAS, db);
  bwd_weights.run();
}

void* aligned_zeroed_alloc(std::size_t bytes) {
  const std::size_t rounded = (bytes + 63) / 64 * 64 + (bytes == 0 ? 64 : 0);
  void* p = std::aligned_alloc(64, rounded);
  if (!p) {
    throw LibraryError(format_error(
        "out of host memory allocating " + std::to_string(bytes) + " bytes", __FILE__, __LINE__));
  }
  std::memset(p, 0, rounded);
  return p;
}

void aligned_free(void* p) noexcept { std::free(p); }

namespace {
// The element-wise passes below exist for AVX2 and baseline x86-64 (core/simd.hpp).

/// The OR of nonfinite_bit over p[0, n).
DT_SIMD_CLONES std::uint32_t nonfinite_bits(const float* __restrict p, std::size_t n) {
  std::uint32_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) bad |= nonfinite_bit(p[i]);
  return bad;
}

/// The gradient of optimizer_chunk: written (the updated parameters) when kIntoGrad.
template <bool kIntoGrad>
using GradPtr = std::conditional_t<kIntoGrad, float*, const float*>;

/// p[i] = x, and with kIntoGrad g[i] = x too (Backend::optimizer_update_into_grad).
template <bool kIntoGrad>
inline void set_param(float* __restrict p, GradPtr<kIntoGrad> __restrict g, std::size_t i,
                      float x) {
  p[i] = x;
  if constexpr (kIntoGrad) g[i] = x;
}

/// The update over [0, n) of one chunk; returns the OR of nonfinite_bit over g (read before g[i]
/// is written, with kIntoGrad).
template <bool kIntoGrad>
DT_SIMD_CLONES std::uint32_t optimizer_chunk(const OptimizerUpdate& u, float* __restrict p,
                                             GradPtr<kIntoGrad> __restrict g, float* __restrict m,
                                             float* __restrict v, std::size_t n) {
  const float lr = u.lr;
  const float wd = u.weight_decay;
  std::uint32_t bad = 0;
  switch (u.kind) {
    case OptimizerKind::sgd:
      for (std::size_t i = 0; i < n; ++i) {
        bad |= nonfinite_bit(g[i]);
        set_param<kIntoGrad>(p, g, i, p[i] - lr * (g[i] + wd * p[i]));
      }
      return bad;
    case OptimizerKind::momentum: {
      const float mu = u.momentum;
      if (u.nesterov) {
        for (std::size_t i = 0; i < n; ++i) {
          bad |= nonfinite_bit(g[i]);
          const float gi = g[i] + wd * p[i];
          const float vi = mu * m[i] + gi;
          m[i] = vi;
          set_param<kIntoGrad>(p, g, i, p[i] - lr * (gi + mu * vi));
        }
      } else {
        for (std::size_t i = 0; i < n; ++i) {
          bad |= nonfinite_bit(g[i]);
          const float vi = mu * m[i] + (g[i] + wd * p[i]);
          m[i] = vi;
          set_param<kIntoGrad>(p, g, i, p[i] - lr * vi);
        }
      }
      return bad;
    }
    case OptimizerKind::adam: {
      const float b1 = u.beta1, b2 = u.beta2, eps = u.epsilon;
      const double t = static_cast<double>(u.step);
      const float bc1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), t));
      const float inv_sqrt_bc2 =
          static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(static_cast<double>(b2), t)));
      const float step_size = lr / bc1;
      for (std::size_t i = 0; i < n; ++i) {
        bad |= nonfinite_bit(g[i]);
        const float gi = g[i] + wd * p[i];
        const float mi = b1 * m[i] + (1.0f - b1) * gi;
        const float vi = b2 * v[i] + (1.0f - b2) * gi * gi;
        m[i] = mi;
        v[i] = vi;
        set_param<kIntoGrad>(p, g, i, p[i] - step_size * mi / (std::sqrt(vi) * inv_sqrt_bc2 + eps));
      }
      return bad;
    }
    case OptimizerKind::lars:
    case OptimizerKind::lamb:
      break;  // layer-wise: optimizer_run refuses them
  }
  DT_ASSERT(false, "unknown optimizer kind");
  return bad;
}

template <bool kIntoGrad>
bool optimizer_run(const OptimizerUpdate& u, float* p, GradPtr<kIntoGrad> g, float* m, float* v,
                   std::size_t n) {
  DT_ASSERT(u.kind == OptimizerKind::sgd || m != nullptr,
            "momentum and adam optimizers need their state buffer m");
  DT_ASSERT(u.kind != OptimizerKind::adam || v != nullptr, "adam optimizer needs its buffer v");
  DT_REQUIRE(u.kind != OptimizerKind::adam || u.step >= 1,
             "adam: step must be >= 1, got " + std::to_string(u.step));
  DT_REQUIRE(u.kind != OptimizerKind::lars && u.kind != OptimizerKind::lamb,
             "optimizer_update: lars and lamb need each tensor's range (layerwise_update)");
  // Elementwise, so the chunking (and the number of threads) changes no value.
  constexpr std::size_t kChunk = 1 << 16;
  const auto chunks = static_cast<std::ptrdiff_t>((n + kChunk - 1) / kChunk);
  // One chunk (a small ps push): no OpenMP region, whose set-up costs ~0.35 µs of a ~2 µs update.
  if (chunks <= 1) return optimizer_chunk<kIntoGrad>(u, p, g, m, v, n) == 0;
  std::uint32_t bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad)
  for (std::ptrdiff_t c = 0; c < chunks; ++c) {
    const std::size_t b = static_cast<std::size_t>(c) * kChunk, e = std::min(n, b + kChunk);
    bad |= optimizer_chunk<kIntoGrad>(u, p + b, g + b, m ? m + b : nullptr, v ? v + b : nullptr,
                                      e - b);
  }
  return bad == 0;
}
}  // namespace

bool optimizer_step(const OptimizerUpdate& u, float* p, const float* g, float* m, float* v,
                    std::size_t n) {
  return optimizer_run<false>(u, p, g, m, v, n);
}

bool optimizer_step_into_grad(const OptimizerUpdate& u, float* p, float* g, float* m, float* v,
                              std::size_t n) {
  return optimizer_run<true>(u, p, g, m, v, n);
}

bool all_finite_host(const float* p, std::size_t n) {
  constexpr std::size_t kChunk = 1 << 16;
  const auto chunks = static_cast<std::ptrdiff_t>((n + kChunk - 1) / kChunk);
  std::uint32_t bad = 0;
#pragma omp parallel for schedule(static) reduction(| : bad) if (chunks > 1)
  for (std::ptrdiff_t c = 0; c < chunks; ++c) {
    const std::size_t b = static_cast<std::size_t>(c) * kChunk, e = std::min(n, b + kChunk);
    bad |= nonfinite_bits(p + b, e - b);
  }
  return bad == 0;
}

std::optional<std::size_t> first_nonfinite_host(const float* p, std::size_t n) {
  if (all_finite_host(p, n)) return std::nullopt;
  for (std::size_t i = 0; i < n; ++i)
    if (nonfinite_bit(p[i]) != 0) return i;
  return std::nullopt;
}

namespace {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(CpuBf16 bf16) : bf16_kernels_(bf16) {
    dnnl_guard("engine/stream creation", "", [&] { ctx_ = std::make_unique<Context>(); });
  }

  [[nodiscard]] Device device() const override { return Device::cpu; }
  [[nodiscard]] std::string name() const override {
    const auto* v = dnnl::version();
    std::string s = "cpu (oneDNN " + std::to_string(v->major) + "." + std::to_string(v->minor) +
                    "." + std::to_string(v->patch);
    if (native_ops_ + emulated_ops_ > 0)
      s += "; bf16: " + std::to_string(native_ops_) + " ops on oneDNN's bf16 kernels, " +
           std::to_string(emulated_ops_) + " emulated";
    return s + ")";
  }

  void* allocate(std::size_t bytes) override { return aligned_zeroed_alloc(bytes); }
  void deallocate(void* p) noexcept override { aligned_free(p); }
  void* allocate_host(std::size_t bytes) override { return aligned_zeroed_alloc(bytes); }
  void deallocate_host(void* p) noexcept override { aligned_free(p); }
  void copy_to_device(void* dst, const void* src, std::size_t bytes) override {
    copy(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    copy(dst, src, bytes);
  }
  void copy_device(void* dst, const void* src, std::size_t bytes) override {
    copy(dst, src, bytes);
  }
  void fill(float* __restrict p, float value, std::size_t n) override {
    for (std::size_t i = 0; i < n; ++i) p[i] = value;
  }
  void scale(float* __restrict p, float alpha, std::size_t n) override {
    const auto len = static_cast<std::ptrdiff_t>(n);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (std::ptrdiff_t i = 0; i < len; ++i) p[i] *= alpha;
  }
  void zero(void* p, std::size_t bytes) override {
    if (bytes != 0) std::memset(p, 0, bytes);
  }
  void add(void* yv, const void* xv, std::size_t n, DType t) override {
    const auto len = static_cast<std::ptrdiff_t>(n);
    if (t == DType::bf16) {
      auto* y = static_cast<std::uint16_t*>(yv);
      const auto* x = static_cast<const std::uint16_t*>(xv);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
      for (std::ptrdiff_t i = 0; i < len; ++i)
        y[i] = float_to_bf16(bf16_to_float(y[i]) + bf16_to_float(x[i]));
      return;
    }
    auto* y = static_cast<float*>(yv);
    const auto* x = static_cast<const float*>(xv);
#pragma omp parallel for simd schedule(static) if (n >= kParallelMin)
    for (std::ptrdiff_t i = 0; i < len; ++i) y[i] += x[i];
  }
  void cast(const void* x, DType from, void* y, DType to, std::size_t n) override {
    if (from == to) return copy(y, x, n * dtype_size(to));
    const auto len = static_cast<std::ptrdiff_t>(n);
    if (to == DType::bf16) {
      const auto* src = static_cast<const float*>(x);
      auto* dst = static_cast<std::uint16_t*>(y);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
      for (std::ptrdiff_t i = 0; i < len; ++i) dst[i] = float_to_bf16(src[i]);
    } else {
      const auto* src = static_cast<const std::uint16_t*>(x);
      auto* dst = static_cast<float*>(y);
#pragma omp parallel for schedule(static) if (n >= kParallelMin)
      for (std::ptrdiff_t i = 0; i < len; ++i) dst[i] = bf16_to_float(src[i]);
    }
  }
  void copy_2d(void* dst, std::size_t dst_pitch, const void* src, std::size_t src_pitch,
               std::size_t width, std::size_t rows) override {
    const auto n = static_cast<std::ptrdiff_t>(rows);
    auto* d = static_cast<char*>(dst);
    const auto* s = static_cast<const char*>(src);
#pragma omp parallel for schedule(static) if (width * rows >= 4 * kParallelMin)
    for (std::ptrdiff_t r = 0; r < n; ++r)
      copy(d + static_cast<std::size_t>(r) * dst_pitch, s + static_cast<std::size_t>(r) * src_pitch,
           width);
  }
  void convert_layout(const void* x, void* y, const Shape& s, Layout to, DType t) override {
    const std::array<int, 6> key{s.n, s.c, s.h, s.w, static_cast<int>(to), static_cast<int>(t)};
    auto it = reorders_.find(key);
    if (it == reorders_.end()) {
      const Layout from = to == Layout::nhwc ? Layout::nchw : Layout::nhwc;
      const std::string what = s.str() + " " + dtype_name(t) + " to " + layout_name(to);
      it = dnnl_guard("reorder", what, [&] {
        const dnnl::memory::desc src = md_act(s, from, t), dst = md_act(s, to, t);
        const dnnl::reorder::primitive_desc pd(ctx_->engine, src, ctx_->engine, dst,
                                               user_scratchpad_attr());
        Prim p = Prim::make<dnnl::reorder>(*ctx_, pd, "reorder", what);
        p.user_arg(DNNL_ARG_FROM, src);
        p.user_arg(DNNL_ARG_TO, dst);
        return reorders_.emplace(key, std::move(p)).first;
      });
    }
    Prim& p = it->second;
    p.set(DNNL_ARG_FROM, x);
    p.set(DNNL_ARG_TO, y);
    p.run();
  }
  bool all_finite(const float* p, std::size_t n) override { return all_finite_host(p, n); }
  void synchronize() override {
    dnnl_guard("stream wait", "", [&] { ctx_->stream.wait(); });
  }

  // Under Precision::bf16 an op is oneDNN's bf16 one where this CPU has a fast kernel for it
  // (CpuBf16::native), else the fp32 op wrapped by the emulation (bf16_emulation.hpp).
  std::unique_ptr<ConvOp> make_conv(const ConvDesc& d) override {
    return make_op([&](DType t) { return make_conv_op(*ctx_, d, layout(), t); },
                   [&](Bf16Emulation& e, auto op) { return e.wrap(d, std::move(op)); });
  }
  std::unique_ptr<PoolOp> make_pool(const PoolDesc& d) override {
    return make_op([&](DType t) { return make_pool_op(*ctx_, d, layout(), t); },
                   [&](Bf16Emulation& e, auto op) { return e.wrap(d, std::move(op)); });
  }
  std::unique_ptr<ActivationOp> make_activation(ActKind kind, const Shape& shape) override {
    return make_op(
        [&](DType t) { return make_activation_op(*ctx_, kind, shape, t); },
        [&](Bf16Emulation& e, auto op) { return e.wrap_activation(shape, std::move(op)); });
  }
  std::unique_ptr<BatchNormOp> make_batchnorm(const BatchNormDesc& d) override {
    return make_op([&](DType t) { return make_batchnorm_op(*ctx_, d, layout(), t); },
                   [&](Bf16Emulation& e, auto op) { return e.wrap(d, std::move(op)); });
  }
  std::unique_ptr<DenseOp> make_dense(const DenseDesc& d) override {
    return make_op([&](DType t) { return make_dense_op(*ctx_, d, t); },
                   [&](Bf16Emulation& e, auto op) { return e.wrap(d, std::move(op)); });
  }
  std::unique_ptr<DropoutOp> make_dropout(const Shape& shape, float p) override {
    return emulated(make_dropout_op(shape, p), [&](Bf16Emulation& e, auto op) {
      return e.wrap_dropout(shape, std::move(op));
    });
  }
  std::unique_ptr<SoftmaxXentOp> make_softmax_xent(int batch, int classes) override {
    return emulated(
        make_softmax_xent_op(batch, classes, label_smoothing()),
        [&](Bf16Emulation& e, auto op) { return e.wrap_loss(batch, classes, std::move(op)); });
  }
  bool optimizer_update(const OptimizerUpdate& u, float* p, const float* g, float* m, float* v,
                        std::size_t n) override {
    if (guard_bad_) return false;  // the latest check_gradient found a non-finite value
    return optimizer_step(u, p, g, m, v, n);
  }
  bool layerwise_update(const OptimizerUpdate& u, const std::vector<ParamSegment>& segments,
                        float* p, const float* g, float* m, float* v) override {
    if (guard_bad_) return false;  // as optimizer_update
    return layerwise_step(u, segments, p, g, m, v);
  }
  bool optimizer_update_into_grad(const OptimizerUpdate& u, float* p, float* g, float* m, float* v,
                                  std::size_t n) override {
    // Guarded (nothing applied): the default, which copies the unchanged p into g.
    if (guard_bad_) return Backend::optimizer_update_into_grad(u, p, g, m, v, n);
    return optimizer_step_into_grad(u, p, g, m, v, n);
  }
  void check_gradient(const float* g, std::size_t n) override {
    DT_REQUIRE(checks_.size() < static_cast<std::size_t>(kMaxPendingChecks),
               "check_gradient: " + std::to_string(checks_.size()) +
                   " earlier answers are still unread");
    checks_.push_back(first_nonfinite_host(g, n));
    guard_bad_ = checks_.back().has_value();
  }
  std::optional<std::size_t> take_gradient_check() override {
    DT_REQUIRE(!checks_.empty(), "take_gradient_check: no check_gradient answer is unread");
    const std::optional<std::size_t> first = checks_.front();
    checks_.pop_front();
    return first;
  }

 private:
  static constexpr std::size_t kParallelMin = 1 << 16;  // elements; below, threads cost more
  static void copy(void* dst, const void* src, std::size_t bytes) {
    if (bytes != 0 && dst != src) std::memcpy(dst, src, bytes);
  }
  /// An op from make(DType): under Precision::bf16 the native bf16 one (CpuBf16::native) when
  /// make(bf16) builds one, else make(f32) wrapped by wrap(emulation, op); fp32: make(f32).
  template <typename Make, typename Wrap>
  auto make_op(Make make, Wrap wrap) -> decltype(make(DType::f32)) {
    if (precision() == Precision::bf16 && bf16_kernels_ == CpuBf16::native)
      if (auto op = make(DType::bf16)) {
        ++native_ops_;
        return op;
      }
    return emulated(make(DType::f32), wrap);
  }
  /// The fp32 op: as it is under Precision::fp32, wrapped by wrap(emulation, op) under bf16.
  template <typename Op, typename Wrap>
  Op emulated(Op op, Wrap wrap) {
    if (!bf16()) return op;
    ++emulated_ops_;
    return wrap(*bf16(), std::move(op));
  }
  /// The bf16 emulation under Precision::bf16 (made on first use), else nullptr.
  Bf16Emulation* bf16() {
    if (precision() != Precision::bf16) return nullptr;
    if (!bf16_) bf16_ = std::make_unique<Bf16Emulation>(*this);
    return bf16_.get();
  }
  CpuBf16 bf16_kernels_;
  int native_ops_ = 0, emulated_ops_ = 0;  ///< bf16 ops made by make_op, for name()
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<Bf16Emulation> bf16_;
  std::deque<std::optional<std::size_t>> checks_;  ///< unread check_gradient answers
  bool guard_bad_ = false;  ///< the latest check found a non-finite value: updates do nothing
  /// convert_layout's reorders, made on first use, by (N, C, H, W, target layout, dtype).
  std::map<std::array<int, 6>, Prim> reorders_;
};

}  // namespace
}  // namespace dtrain::onednn

namespace dtrain {
std::unique_ptr<Backend> make_cpu_backend(CpuBf16 bf16) {
  return std::make_unique<onednn::CpuBackend>(bf16);
}
}  // namespace dtrain
