// src/dnn/onednn/onednn_common.hpp — private helpers shared by the oneDNN CPU backend's ops.
//
// Follows the oneDNN 2.6 C++ API (op::desc + op::primitive_desc(desc, engine[, attr][, hint])).
// Every op builds its primitives once; a `Prim` bundles one primitive with the dnnl::memory
// objects of its arguments (plain layouts wrapped around user pointers, rebound per call with
// set_data_handle) and a user-mode scratchpad allocated once, so executing allocates nothing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <oneapi/dnnl/dnnl.hpp>
#include <cstdlib>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "dtrain/dnn/backend.hpp"

namespace dtrain::onednn {

/// Transient memory shared by every op of one backend: the internal (blocked-layout) copies of
/// reordered arguments and the primitives' scratchpads live only while one primitive runs, and
/// the backend runs one primitive at a time, so one buffer serves them all (sized to the largest
/// need) instead of one per op — for ResNet-50 that is the difference between one activation-sized
/// buffer and several per convolution. Grows, never shrinks; 64-byte aligned; not thread-safe.
class Arena {
 public:
  /// A buffer of at least `bytes` bytes; valid until the next reserve() that grows it.
  char* reserve(std::size_t bytes);
  [[nodiscard]] std::size_t capacity() const { return size_; }

 private:
  std::unique_ptr<char, void (*)(void*)> p_{nullptr, &std::free};
  std::size_t size_ = 0;
};

/// The engine and stream a CpuBackend owns; ops keep a reference (the backend outlives its ops).
struct Context {
  dnnl::engine engine{dnnl::engine::kind::cpu, 0};
  mutable dnnl::stream stream{engine};  // wait() is non-const in the C++ API
  mutable Arena scratch;                // see Arena
};

/// Throws LibraryError "oneDNN <what> [<shape>]: <message> (status N)".
[[noreturn]] void throw_dnnl(const std::string& what, const std::string& shape,
                             const dnnl::error& e);

/// Runs f(), turning a dnnl::error into LibraryError naming the primitive and shape.
template <typename F>
decltype(auto) dnnl_guard(const std::string& what, const std::string& shape, F&& f) {
  try {
    return f();
  } catch (const dnnl::error& e) {
    throw_dnnl(what, shape, e);
  }
}

/// Plain memory descriptors, fp32 unless stated: md_act is an activation of shape s (N×C×H×W)
/// in `layout` (format_tag nchw or nhwc) of elements of type t.
dnnl::memory::desc md_act(const Shape& s, Layout layout, DType t = DType::f32);
dnnl::memory::desc md_nc(int n, int c, DType t = DType::f32);
dnnl::memory::desc md_x(std::size_t n, DType t = DType::f32);
/// `md`'s dimensions in the channel-blocked layout of oneDNN's jit kernels for this CPU (nChw16c
/// on AVX-512, nChw8c below), elements of type t.
dnnl::memory::desc md_blocked(const dnnl::memory::desc& md, DType t);
/// oneDNN's data type for t: f32 | bf16.
dnnl::memory::data_type dnnl_type(DType t);
/// `md`'s dimensions with data type t and format_tag::any (oneDNN picks the layout).
dnnl::memory::desc md_any(const dnnl::memory::desc& md, DType t);
/// True when oneDNN runs the primitive of `impl` (primitive_desc::impl_info_str()) with a
/// reference kernel ("ref:any", "ref_...", "bnorm_ref:any": plain loops, many times slower than
/// its jit kernels).
bool is_reference_impl(const char* impl);
/// True when `avoid` and one of the primitive descriptors runs a reference kernel: an op's
/// check before it builds a route it has a faster alternative to (bf16: the emulation).
template <typename... PD>
bool avoided_reference(bool avoid, const PD&... pds) {
  return avoid && (is_reference_impl(pds.impl_info_str()) || ...);
}

/// An op's build() (returning whether it built the op) under dnnl_guard(what, shape): false when
/// t is bf16 and oneDNN has no bf16 implementation of a primitive at all (dnnl::error with status
/// dnnl_unimplemented: oneDNN 2.6 has bf16 primitives, even reference ones, only on AVX-512
/// CPUs); any other dnnl::error becomes LibraryError naming the primitive and shape.
template <typename Build>
bool build_op(const std::string& what, const std::string& shape, DType t, Build&& build) {
  return dnnl_guard(what, shape, [&] {
    try {
      return build();
    } catch (const dnnl::error& e) {
      if (t == DType::bf16 && e.status == dnnl_unimplemented) return false;
      throw;
    }
  });
}

/// Primitive attributes with a user-managed scratchpad (so execution never allocates).
dnnl::primitive_attr user_scratchpad_attr();

/// One primitive, its argument memories and its scratchpad.
class Prim {
 public:
  Prim() = default;
  /// `pd` must have been created with user_scratchpad_attr(); the scratchpad lives in the
  /// context's Arena while run() executes. `what` and `shape` name the primitive in errors.
  template <typename PrimT, typename PD>
  static Prim make(const Context& ctx, const PD& pd, std::string what, std::string shape) {
    Prim p;
    p.ctx_ = &ctx;
    p.what_ = std::move(what);
    p.shape_ = std::move(shape);
    p.prim_ = PrimT(pd);
    const auto sd = pd.scratchpad_desc();
    if (sd.get_size() > 0) p.transient(DNNL_ARG_SCRATCHPAD, sd);
    return p;
  }
  /// Declares argument `arg` as a user pointer of layout `md` (bound later with set()).
  void user_arg(int arg, const dnnl::memory::desc& md);
  /// Declares argument `arg` as a user pointer of layout `user_md` that the primitive wants in
  /// layout `prim_md` (chosen by oneDNN from format_tag::any, e.g. a blocked nChw8c). When the two
  /// differ, a reorder is created once and an internal buffer is placed in the context's Arena;
  /// run() reorders inputs before and outputs after the primitive. Otherwise this is user_arg().
  void staged_arg(int arg, const dnnl::memory::desc& user_md, const dnnl::memory::desc& prim_md,
                  bool is_output);
  /// Declares argument `arg` as a memory the op owns or shares (e.g. a pooling workspace).
  void owned_arg(int arg, const dnnl::memory& m) { args_[arg] = m; }
  /// Binds a user pointer to a declared argument.
  void set(int arg, const void* p) {
    auto it = staged_.find(arg);
    (it != staged_.end() ? it->second.user : args_.at(arg)).set_data_handle(const_cast<void*>(p));
  }
  /// Executes on the context's stream and waits (the CPU backend is synchronous).
  void run();
  [[nodiscard]] bool valid() const { return ctx_ != nullptr; }

 private:
  /// Declares argument `arg` as transient memory of layout `md`, placed in the Arena by run().
  void transient(int arg, const dnnl::memory::desc& md);

  const Context* ctx_ = nullptr;
  std::string what_, shape_;  // primitive name and problem shape, for error messages
  dnnl::primitive prim_;
  std::vector<std::pair<int, std::size_t>> transient_;  // (arg, byte offset in the Arena)
  std::size_t transient_bytes_ = 0;
  std::unordered_map<int, dnnl::memory> args_;
  struct Staged {
    dnnl::memory user;      // wraps the caller's pointer, plain layout
    dnnl::reorder reorder;  // user → internal (inputs) or internal → user (outputs)
    bool is_output = false;
  };
  std::unordered_map<int, Staged> staged_;  // internal memories live in args_
};

/// The three primitives of a layer with weights and a bias (convolution, inner product), which
/// take their arguments the same way.
struct WeightedPrims {
  Prim fwd, bwd_data, bwd_weights;
  bool bias = true;  ///< false: b and db are ignored (the primitives were made without bias)
  /// y = op(x, w) + b.
  void forward(const void* x, const float* w, const float* b, void* y);
  /// dx (skipped when nullptr), dw, db from dy; see ConvOp/DenseOp::backward.
  void backward(const void* x, const float* w, const void* dy, void* dx, float* dw, float* db);
};

/// 64-byte aligned, zero-filled host allocation (bytes rounded up to 64); throws LibraryError.
void* aligned_zeroed_alloc(std::size_t bytes);
void aligned_free(void* p) noexcept;

/// A fixed-size, 64-byte aligned float array owned by an op (e.g. a dropout mask).
class HostArray {
 public:
  HostArray() = default;
  explicit HostArray(std::size_t n)
      : n_(n), p_(static_cast<float*>(aligned_zeroed_alloc(n * sizeof(float))), &aligned_free) {}
  [[nodiscard]] float* data() const { return p_.get(); }
  [[nodiscard]] std::size_t size() const { return n_; }

 private:
  std::size_t n_ = 0;
  std::unique_ptr<float, void (*)(void*)> p_{nullptr, &aligned_free};
};

/// `op` as its interface type, or nullptr when op->built() is false (a bf16 op oneDNN has no
/// fast kernel for: the factories below).
template <typename Base, typename Op>
std::unique_ptr<Base> if_built(std::unique_ptr<Op> op) {
  return op->built() ? std::unique_ptr<Base>(std::move(op)) : nullptr;
}

// Op factories (one translation unit per family); each throws InputError for a bad shape and
// LibraryError when oneDNN cannot create the primitive. `t` is the type of the activations and
// their gradients (the tensors between layers): f32, or bf16 — oneDNN's native bf16 kernels
// (made for AVX512_BF16 / AMX), reading bf16 copies of the fp32 weights (reordered per call with
// round-to-nearest-even), accumulating in fp32, writing fp32 parameter gradients; scales, shifts,
// biases and batch statistics stay fp32. With t = bf16 a factory returns nullptr, building
// nothing, where oneDNN has no bf16 primitive on this CPU (no AVX-512) or only a slow one (a
// reference kernel; batchnorm's plain-loop ncsp/nspc kernels): the backend then uses the fp32 op
// under its bf16 emulation.
std::unique_ptr<ConvOp> make_conv_op(const Context& ctx, const ConvDesc& d, Layout layout,
                                     DType t = DType::f32);
std::unique_ptr<PoolOp> make_pool_op(const Context& ctx, const PoolDesc& d, Layout layout,
                                     DType t = DType::f32);
std::unique_ptr<ActivationOp> make_activation_op(const Context& ctx, ActKind kind,
                                                 const Shape& shape, DType t = DType::f32);
std::unique_ptr<BatchNormOp> make_batchnorm_op(const Context& ctx, const BatchNormDesc& d,
                                               Layout layout, DType t = DType::f32);
std::unique_ptr<DenseOp> make_dense_op(const Context& ctx, const DenseDesc& d,
                                       DType t = DType::f32);
std::unique_ptr<DropoutOp> make_dropout_op(const Shape& shape, float p);
std::unique_ptr<SoftmaxXentOp> make_softmax_xent_op(int batch, int classes, float label_smoothing);
/// 1 in bit 31 when x is ±Inf or NaN (all-ones exponent: adding one to it carries into bit 31),
/// else 0 there: OR-ed over a range, a branch-free finiteness test the compiler vectorizes.
inline std::uint32_t nonfinite_bit(float x) {
  std::uint32_t u = 0;
  std::memcpy(&u, &x, sizeof u);
  return ((u & 0x7f800000u) + 0x00800000u) & 0x80000000u;
}
/// Backend::layerwise_update on host memory (LARS or LAMB), the tensors over the OpenMP threads;
/// returns whether every g value was finite. Throws as check_layerwise().
bool layerwise_step(const OptimizerUpdate& u, const std::vector<ParamSegment>& segments, float* p,
                    const float* g, float* m, float* v);
/// Plain-loop optimizer step (see OptimizerUpdate), in chunks over the OpenMP threads; returns
/// whether every g value was finite (read in the same pass; the update is applied regardless).
bool optimizer_step(const OptimizerUpdate& u, float* p, const float* g, float* m, float* v,
                    std::size_t n);
/// optimizer_step, writing each updated p[i] to g[i] too (Backend::optimizer_update_into_grad).
bool optimizer_step_into_grad(const OptimizerUpdate& u, float* p, float* g, float* m, float* v,
                              std::size_t n);
/// True when none of the n host floats is ±Inf or NaN (vectorized, over the OpenMP threads).
bool all_finite_host(const float* p, std::size_t n);
/// The index of the first ±Inf or NaN among the n host floats, or std::nullopt (all_finite_host
/// first: the element search runs only where one exists).
std::optional<std::size_t> first_nonfinite_host(const float* p, std::size_t n);

}  // namespace dtrain::onednn
