// src/dnn/cuda/conv_graph.hpp — 2-D convolutions through cuDNN's graph API (cudnn_graph.h, the
// "backend" API of cuDNN ≥ 8; --conv-api graph): each direction (forward, backward-data,
// backward-filter) is a one-operation graph whose engine comes from cuDNN's heuristics (mode A,
// then FALLBACK), filtered by engine_rejection (conv_engine_rule.hpp), finalized into an
// execution plan and run with cudnnBackendExecute. This reaches the engines the legacy
// cudnnConvolution* calls cannot (PyTorch ≥ 1.9 runs its convolutions this way: its cuDNN "v8
// API"). Plans depend on the problem only, so the convolutions of one problem on one backend
// share them (GraphConvPlans).
#pragma once

#include <cudnn.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend_desc.hpp"
#include "conv_engine_rule.hpp"
#include "dtrain/dnn/backend.hpp"

namespace dtrain::cuda {

/// A convolution's three computations; each reads and writes tensors shaped as x, w or y:
/// fprop y = conv(x, w); dgrad x ← conv_bwd_data(w, y) + β·x (y holding dy, x receiving dx);
/// wgrad w ← conv_bwd_filter(x, y) (y holding dy, w receiving dw).
enum class ConvDirection { fprop, dgrad, wgrad };

/// "fwd", "bwd-data", "bwd-filter" (the log's names, as the legacy path's).
const char* direction_name(ConvDirection d);

/// One convolution problem: x N×C×H×W, w K×C×R×S, y N×K×P×Q (dims in this logical order);
/// with Layout::nhwc x and y are stored NHWC and w KRSC, else NCHW and KCRS. Elements of `dtype`
/// (fp32 or bf16), fp32 accumulation; cross-correlation, symmetric padding, no dilation. x and y
/// are 16-byte aligned (GraphConvCall::kAlignment), w (and dw) at least w_alignment bytes: 4
/// where the op passes the model's own fp32 weights, which lie at any float offset of the flat
/// parameter buffer.
struct ConvProblem {
  Shape x, w, y;
  Hw stride, pad;
  Layout layout = Layout::nchw;
  DType dtype = DType::f32;
  std::int64_t w_alignment = 16;
  /// fprop only: what the same graph applies to the convolution's fp32 result before y is
  /// written — a per-channel bias (fp32, K values, 16-byte aligned) and/or a relu — so that y is
  /// written once (cuDNN's runtime-fusion engines: conv → pointwise add → pointwise relu).
  bool bias = false, relu = false;
};

/// One direction's finalized execution plan, immutable; with the descriptors it was built from.
class GraphConvPlan {
 public:
  /// Builds the plan of `dir` for `prob` on handle `h` (out = conv + β·out, β = `beta`): the
  /// first configuration in cuDNN's ranking that `policy` accepts and that finalizes — with
  /// `benchmark`, the fastest of the first kTimedConfigs such configurations, each timed on
  /// scratch buffers (allocated for the timing, then freed). Returns nullptr when no engine
  /// qualifies, or when cuDNN refuses the graph or a query (a fused epilogue this cuDNN cannot
  /// build), with the reasons in *why; never throws dtrain::Error.
  static std::shared_ptr<const GraphConvPlan> build(cudnnHandle_t h, const ConvProblem& prob,
                                                    ConvDirection dir, float beta,
                                                    const EnginePolicy& policy, bool benchmark,
                                                    std::string* why);
  /// Configurations timed at most by build(…, benchmark = true).
  static constexpr int kTimedConfigs = 8;

  [[nodiscard]] std::size_t workspace_bytes() const { return workspace_; }
  /// "engine 42 (tensor core, 12 MiB)", with ", 0.123 ms" when timed.
  [[nodiscard]] const std::string& description() const { return description_; }
  [[nodiscard]] cudnnBackendDescriptor_t plan() const { return plan_.get(); }
  /// Milliseconds per run measured by build(…, benchmark = true); +infinity when not timed.
  [[nodiscard]] float timed_ms() const { return timed_ms_; }
  /// The alignment the plan assumes of the w-shaped tensor, bytes (ConvProblem::w_alignment).
  [[nodiscard]] std::int64_t w_alignment() const { return w_alignment_; }

  struct Parts;  ///< the descriptors a plan keeps alive (conv_graph.cpp)
  GraphConvPlan(std::shared_ptr<Parts> parts, BackendDesc plan, std::size_t workspace,
                std::string description, std::int64_t w_alignment, float timed_ms);

 private:
  /// build() without the catch: cuDNN's refusals throw LibraryError.
  static std::shared_ptr<const GraphConvPlan> build_plan(cudnnHandle_t h, const ConvProblem& prob,
                                                         ConvDirection dir, float beta,
                                                         const EnginePolicy& policy, bool benchmark,
                                                         std::string* why);
  std::shared_ptr<Parts> parts_;
  BackendDesc plan_;
  std::size_t workspace_ = 0;
  std::string description_;
  std::int64_t w_alignment_ = 16;
  float timed_ms_ = 0.0f;
};

/// Runs plans for one call site (one direction of one op): the variant pack (the tensors'
/// addresses and the workspace) is rebuilt only when an address or the plan changes.
class GraphConvCall {
 public:
  /// Queues `plan` on h's stream with x-, w- and y-shaped tensors at x, w, y (see
  /// ConvDirection for which are read and written), the bias at b (a plan built with
  /// ConvProblem::bias; else nullptr) and `workspace` (≥ plan.workspace_bytes()). Throws
  /// LibraryError when cuDNN fails.
  void run(cudnnHandle_t h, const GraphConvPlan& plan, const void* x, const void* w, const void* y,
           void* workspace, const void* b = nullptr);
  /// The alignment the plans assume of x and y, bytes (cudaMalloc'd buffers and the activation
  /// arena's slots have it; a tensor at an odd offset may not).
  static constexpr std::int64_t kAlignment = 16;
  /// Whether `p` is a multiple of `bytes`.
  static bool aligned(const void* p, std::int64_t bytes = kAlignment);

 private:
  BackendDesc pack_;
  const GraphConvPlan* plan_ = nullptr;
  std::array<const void*, 5> ptrs_{};
};

/// The plans of one backend (its cuDNN handle), by problem, direction, β and policy: the
/// convolutions of one problem (ResNet-50's repeated blocks) build each plan once, and a failed
/// build is remembered too. Thread-safe.
class GraphConvPlans {
 public:
  /// The plan for `key` (which must name everything build() depends on), built by `build` on
  /// first use; nullptr (with *why) when none could be built.
  template <typename Build>
  std::shared_ptr<const GraphConvPlan> get(const std::string& key, std::string* why, Build build) {
    const std::lock_guard<std::mutex> lock(mu_);
    auto it = plans_.find(key);
    if (it == plans_.end()) {
      Entry e;
      e.plan = build(&e.why);
      it = plans_.emplace(key, std::move(e)).first;
    }
    if (why != nullptr) *why = it->second.why;
    return it->second.plan;
  }
  /// How many plans were built (failed builds not counted).
  [[nodiscard]] std::size_t built() {
    const std::lock_guard<std::mutex> lock(mu_);
    std::size_t n = 0;
    for (const auto& [key, e] : plans_) n += e.plan != nullptr;
    return n;
  }

 private:
  struct Entry {
    std::shared_ptr<const GraphConvPlan> plan;
    std::string why;
  };
  std::mutex mu_;
  std::map<std::string, Entry> plans_;
};

}  // namespace dtrain::cuda
