// src/dnn/cuda/conv_op.cpp — 2-D convolution on cuDNN (legacy API of cudnn_cnn.h, cuDNN 9):
// cudnnConvolutionForward, cudnnConvolutionBackwardData / BackwardFilter; the bias (unless
// bias=false) added and its gradient summed by our per-channel kernels (channel_kernels.cu);
// kernel, stride and padding per axis (1×7, 7×1 for Inception).
// Algorithms are chosen once per shape in the constructor from cuDNN's ranked list — the
// cudnnGet*Algorithm_v7 heuristics (no cost; the default), or with --cudnn-benchmark every
// algorithm timed on this GPU by cudnnFind*Algorithm once per problem (PyTorch's
// cudnn.benchmark = True, TensorFlow's autotuning) — the first that fits
// the workspace limit (--conv-workspace-mb, default kConvWorkspaceLimit) and has an allowed
// math type. --math tf32 (the speed setting): cuDNN's first
// such choice, as PyTorch with cudnn.benchmark off. --math fp32 (the parity setting): never a
// tensor-op math type (results match the fp32 CPU backend). --deterministic true (PyTorch's
// cudnn.deterministic): a deterministic algorithm (bit-reproducible runs) when one fits, else
// the first fitting one. Each direction gets
// its own descriptor set to the chosen algorithm's math type (as cudnnGet*Algorithm_v7 asks), and
// the choice is logged once per process and shape. The workspace is the backend's shared one.
// With the backend's NHWC layout x and y are NHWC and the filter KRSC (converted per call).
// --precision bf16: x, y, dx, dy and the filter cuDNN reads are bf16 (CUDNN_DATA_BFLOAT16 with
// fp32 compute, cuDNN's BFLOAT16_CONFIG; tensor-op algorithms allowed), the filter a per-call
// bf16 copy of the fp32 weights; cuDNN writes the weight gradient in bf16, widened into the fp32
// dw. The filter copy made by forward is reused by the backward of the same step.
// set_accumulate_dx: backward-data blends into dx with β = 1 (the gradient of a tensor that
// several layers read, summed without a scratch buffer). enable_relu (layer fusion): the bias add
// and the relu in one pass over y, and in backward the relu's mask applied to dy in the pass that
// sums the bias gradient (channel_kernels.cu) — per layer one read-and-write pass over y fewer
// forward, one read of dy fewer backward, and a launch fewer each way.
// --conv-api graph: each direction runs the plan of cuDNN's graph API (conv_graph.hpp) where one
// qualifies, the legacy call (whose algorithms are chosen either way) where none does or an
// address is not 16-byte aligned; the log line names what each direction runs. The forward's fused
// epilogue (bias and/or relu in the same graph) is chosen by the first forward, once the model's
// layer fusion has said whether a relu joins it: building a runtime-fusion plan compiles it, and
// a plan built when the op is made would be thrown away by enable_relu. The first forward of a
// batch size runs eagerly (StepGraphs' warm-up step), so a captured step never builds one.
#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "channel_kernels.hpp"
#include "cuda_backend.hpp"
#include "dtrain/core/log.hpp"
#include "kernels.hpp"

namespace dtrain::cuda {
namespace {

/// A direction not timed (its legacy algorithm from the heuristics).
constexpr float kNotTimed = std::numeric_limits<float>::infinity();

bool is_tensor_op(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

const char* math_name(cudnnMathType_t m) {
  switch (m) {
    case CUDNN_DEFAULT_MATH:
      return "default";
    case CUDNN_TENSOR_OP_MATH:
      return "tensor-op";
    case CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION:
      return "tensor-op-conversion";
    case CUDNN_FMA_MATH:
      return "fma";
  }
  return "?";
}

/// One direction's pick from cuDNN's ranked list (Perf: cudnnConvolution*AlgoPerf_t).
template <typename Perf>
Perf pick_algorithm(const std::vector<Perf>& perfs, int returned, bool allow_tensor_op,
                    bool deterministic, std::size_t limit, const char* what,
                    const std::string& shape) {
  for (int strict = 1; strict >= 0; --strict) {
    for (int i = 0; i < returned; ++i) {
      const Perf& p = perfs[static_cast<std::size_t>(i)];
      if (p.status != CUDNN_STATUS_SUCCESS || p.memory > limit) continue;
      if (!allow_tensor_op && is_tensor_op(p.mathType)) continue;
      if (strict && deterministic && p.determinism != CUDNN_DETERMINISTIC) continue;
      return p;
    }
  }
  throw LibraryError(format_error(std::string("cuDNN offers no ") + what + " algorithm " +
                                      (allow_tensor_op ? "" : "without tensor-op math ") +
                                      "within the workspace limit for conv " + shape,
                                  __FILE__, __LINE__));
}

/// "fwd algo 1 (fma, deterministic, 0.0 MiB)"
template <typename Perf>
std::string describe(const char* what, const Perf& p) {
  return std::string(what) + " algo " + std::to_string(static_cast<int>(p.algo)) + " (" +
         math_name(p.mathType) + (p.determinism == CUDNN_DETERMINISTIC ? ", deterministic" : "") +
         ", " + std::to_string(p.memory >> 20) + " MiB)";
}

/// One direction's algorithm: cuDNN's ranked list, as `ask(max, &returned, perfs)` fills it —
/// cudnnFind*Algorithm (every algorithm timed on this GPU, fastest first: --cudnn-benchmark) or
/// the cudnnGet*Algorithm_v7 heuristics — then pick_algorithm's filter. Timed picks are kept per
/// process by `what` and `key` (the problem: shapes, math, dtype, layout), so a network's repeated
/// convolutions (ResNet-50's identical blocks) are timed once, as PyTorch's cudnn.benchmark cache.
template <typename Perf, typename Ask>
Perf choose(int max, bool benchmark, const char* what, const std::string& key, bool tf32,
            bool deterministic, std::size_t limit, Ask ask) {
  static std::mutex mu;
  static std::map<std::string, Perf> timed;
  const std::string id = std::string(what) + " " + key;
  if (benchmark) {
    const std::lock_guard<std::mutex> lock(mu);
    if (auto it = timed.find(id); it != timed.end()) return it->second;
  }
  int got = 0;
  std::vector<Perf> perf(static_cast<std::size_t>(std::max(max, 1)));
  DT_CHECK_CUDNN(ask(max, &got, perf.data()));
  const Perf p = pick_algorithm(perf, got, tf32, deterministic, limit, what, key);
  if (benchmark) {
    const std::lock_guard<std::mutex> lock(mu);
    timed.emplace(id, p);
  }
  return p;
}

/// Logs `line` the first time this process sees it.
void log_once(const std::string& line) {
  static std::mutex mu;
  static std::set<std::string> seen;
  const std::lock_guard<std::mutex> lock(mu);
  if (seen.insert(line).second) log_info(line);
}

class CudaConvOp final : public ConvOp {
 public:
  CudaConvOp(CudaBackend& be, const ConvDesc& d) : be_(be), desc_(d) {
    const Shape out = d.output();  // InputError for impossible shapes
    make_tensors(out);
    // bf16 runs on tensor cores whatever --math says (there is no bf16 FMA path worth having).
    tf32_ = be.math() == MathMode::tf32 || t_ == DType::bf16;
    const ConvolutionDesc query = conv_desc(tf32_ ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH);
    int n = 0, c = 0, h = 0, w = 0;
    DT_CHECK_CUDNN(cudnnGetConvolution2dForwardOutputDim(query, x_desc_, w_desc_, &n, &c, &h, &w));
    DT_ASSERT(n == out.n && c == out.c && h == out.h && w == out.w,
              "cuDNN conv output " + (Shape{n, c, h, w}).str() + " differs from " + out.str());
    const std::string key = problem_key();
    std::string chosen = choose_algorithms(query, key);
    graph_api_ = be.conv_api() == ConvApi::graph;
    if (graph_api_) chosen = choose_graph_plans(chosen);
    epilogue_pending_ = graph_api_;
    reserve_workspace();
    log_once("cuDNN conv " + key + (be.cudnn_benchmark() ? ", timed" : "") + ": " + chosen);
  }

  void forward(const void* x, const float* w, const float* b, void* y) override {
    const float one = 1.0f, zero = 0.0f;
    const void* f = filter(w);
    filter_ready_ = true;
    if (epilogue_pending_) settle_epilogue();
    if (run_fused(x, f, b, y)) return;
    if (!run_graph(ConvDirection::fprop, x, f, y))
      DT_CHECK_CUDNN(cudnnConvolutionForward(be_.cudnn(), &one, x_desc_, x, w_desc_, f, fwd_desc_,
                                             fwd_algo_, be_.workspace(), be_.workspace_bytes(),
                                             &zero, y_desc_, y));
    if (bias_) launch_add_channel_bias(be_.stream(), out_shape_, y, elem(t_), b, relu_);
    else if (relu_) launch_relu_forward(be_.stream(), y, y, out_count_, elem(t_));
  }

  void backward(const void* x, const float* w, const void* dy, void* dx, float* dw,
                float* db) override {
    run_backward(x, w, dy, dx, dw);
    // The bias gradient Σ_{n,h,w} dy: our deterministic reduction (channel_kernels.cu), an order
    // of magnitude faster than cudnnConvolutionBackwardBias on large NCHW batches.
    if (bias_)
      launch_channel_sum(be_.stream(), out_shape_, dy, elem(t_), db, bias_scratch_.as<float>());
  }

  /// Bias and relu in one pass over y (launch_add_channel_bias); backward_relu masks dy in the
  /// pass that sums the bias gradient. cudnnConvolutionBiasActivationForward is not used: it runs
  /// a relu only with IMPLICIT_PRECOMP_GEMM, which would override the algorithm choice.
  bool enable_relu() override {
    relu_ = true;
    if (graph_api_ && !epilogue_pending_) settle_epilogue();  // after a forward: choose anew
    return true;
  }

  void backward_relu(const void* x, const void* y, const float* w, void* dy, void* dx, float* dw,
                     float* db) override {
    if (!relu_) return ConvOp::backward_relu(x, y, w, dy, dx, dw, db);  // throws
    if (bias_)
      launch_channel_sum_relu_mask(be_.stream(), out_shape_, y, dy, elem(t_), db,
                                   bias_scratch_.as<float>());
    else launch_relu_backward(be_.stream(), y, dy, dy, out_count_, elem(t_));
    run_backward(x, w, dy, dx, dw);
  }

  /// cuDNN blends: dx = 1·conv_bwd_data(dy, w) + β·dx.
  [[nodiscard]] bool can_accumulate_dx() const override { return true; }
  void set_accumulate_dx(bool on) override {
    const float beta = on ? 1.0f : 0.0f;
    if (beta == dx_beta_) return;
    dx_beta_ = beta;
    if (!graph_api_) return;
    const std::string chosen = select_graph_plan(ConvDirection::dgrad);
    reserve_workspace();
    log_once("cuDNN conv " + problem_key() + ", bwd-data adding into dx: " + chosen);
  }

 private:
  /// dx (unless nullptr) and dw from dy: cuDNN's backward-data and backward-filter.
  void run_backward(const void* x, const float* w, const void* dy, void* dx, float* dw) {
    const float one = 1.0f, zero = 0.0f;
    if (dx != nullptr) {
      // The filter forward converted (the weights do not change between the two), else anew.
      const void* f = filter_ready_ && copies() ? converted() : filter(w);
      if (!run_graph(ConvDirection::dgrad, dx, f, dy))
        DT_CHECK_CUDNN(cudnnConvolutionBackwardData(be_.cudnn(), &one, w_desc_, f, y_desc_, dy,
                                                    bwd_data_desc_, bwd_data_algo_, be_.workspace(),
                                                    be_.workspace_bytes(), &dx_beta_, x_desc_, dx));
    }
    filter_ready_ = false;
    // cuDNN writes the gradient in the filter's layout and type; it reaches dw (fp32 KCRS)
    // through dw_krsc_ (layout, and type in the same pass) or dw_lp_ (type only).
    void* dw_cudnn = krsc_ ? dw_krsc_.get() : t_ != DType::f32 ? dw_lp_.get() : dw;
    if (!run_graph(ConvDirection::wgrad, x, dw_cudnn, dy))
      DT_CHECK_CUDNN(cudnnConvolutionBackwardFilter(
          be_.cudnn(), &one, x_desc_, x, y_desc_, dy, bwd_filter_desc_, bwd_filter_algo_,
          be_.workspace(), be_.workspace_bytes(), &zero, w_desc_, dw_cudnn));
    if (krsc_)  // KRSC (of type t_) → fp32 KCRS: per filter an (R·S)×C matrix transposed
      launch_transpose(be_.stream(), dw_krsc_.get(), elem(t_), dw, Elem::f32, w_shape_.n,
                       w_shape_.h * w_shape_.w, w_shape_.c);
    else if (t_ != DType::f32) be_.cast(dw_lp_.get(), t_, dw, DType::f32, w_shape_.count());
  }

  /// The filter as cuDNN reads it: w itself (fp32 KCRS), w rounded to bf16 into w_lp_, or w
  /// converted to KRSC (and rounded, in the same kernel) into w_krsc_.
  const void* filter(const float* w) {
    if (krsc_) {  // fp32 KCRS → KRSC of type t_ in one pass: per filter a C×(R·S) matrix
      launch_transpose(be_.stream(), w, Elem::f32, w_krsc_.get(), elem(t_), w_shape_.n, w_shape_.c,
                       w_shape_.h * w_shape_.w);
      return w_krsc_.get();
    }
    if (t_ == DType::f32) return w;
    be_.cast(w, DType::f32, w_lp_.get(), t_, w_shape_.count());
    return w_lp_.get();
  }
  /// The tensor and filter descriptors, the filter copies and the bias scratch of desc_.
  void make_tensors(const Shape& out) {
    const Shape& in = desc_.input;
    const Layout layout = be_.layout();
    t_ = be_.act_dtype();
    x_desc_ = TensorDesc::of(in, layout, t_);
    y_desc_ = TensorDesc::of(out, layout, t_);
    // NHWC activations take a KRSC filter (what PyTorch's channels_last weights are): the K×C×R×S
    // weights are converted into w_krsc_ per call, the gradient back from dw_krsc_ (nothing to
    // convert for 1×1 kernels or one input channel, where the two orders coincide); bf16 rounds
    // in the same kernel. Otherwise bf16 rounds them into w_lp_ (and widens the gradient from
    // dw_lp_).
    w_desc_ =
        FilterDesc::make(layout, desc_.out_channels, in.c, desc_.kernel.h, desc_.kernel.w, t_);
    w_shape_ = Shape{desc_.out_channels, in.c, desc_.kernel.h, desc_.kernel.w};
    const std::size_t wbytes = w_shape_.count() * dtype_size(t_);
    krsc_ = be_.differs_from_nchw(w_shape_);
    if (krsc_) {
      w_krsc_ = DeviceMemory::create(wbytes);
      dw_krsc_ = DeviceMemory::create(wbytes);
    }
    if (t_ != DType::f32 && !krsc_) {
      w_lp_ = DeviceMemory::create(wbytes);
      dw_lp_ = DeviceMemory::create(wbytes);
    }
    bias_ = desc_.bias;
    out_count_ = out.count();
    // The per-channel kernels see an NHWC tensor as (N·H·W)×C×1×1, the same memory.
    out_shape_ = layout == Layout::nhwc ? ChannelShape{out.n * out.h * out.w, out.c, 1, 1}
                                        : ChannelShape{out.n, out.c, out.h, out.w};
    if (bias_)
      bias_scratch_ = DeviceMemory::create(channel_scratch_floats(out_shape_) * sizeof(float));
  }

  /// A convolution descriptor of desc_ with math m; without tensor ops every descriptor is FMA
  /// math: a pick reported as CUDNN_DEFAULT_MATH would otherwise let cuDNN use TF32 for fp32 data
  /// on compute capability >= 8.0.
  [[nodiscard]] ConvolutionDesc conv_desc(cudnnMathType_t m) const {
    return ConvolutionDesc::create(desc_.pad.h, desc_.pad.w, desc_.stride.h, desc_.stride.w,
                                   tf32_ ? m : CUDNN_FMA_MATH);
  }

  /// The most workspace one algorithm may use, bytes (--conv-workspace-mb).
  [[nodiscard]] std::size_t workspace_limit() const {
    return be_.conv_workspace_mb() > 0 ? be_.conv_workspace_mb() << 20 : kConvWorkspaceLimit;
  }

  /// What makes two convolutions the same problem for the benchmark's cache (and the log).
  [[nodiscard]] std::string problem_key() const {
    const ConvDesc& d = desc_;
    const std::string shape = d.input.str() + " k=" + d.kernel.str() + " s=" + d.stride.str() +
                              " p=" + d.pad.str() + " filters=" + std::to_string(d.out_channels);
    const std::string math = t_ == DType::bf16 ? " bf16" : (tf32_ ? " tf32" : " fp32");
    return shape + math + " " + layout_name(be_.layout()) +
           (be_.deterministic() ? " deterministic" : "") +
           " ws<=" + std::to_string(workspace_limit() >> 20) + "MiB";
  }

  /// The forward, backward-data and backward-filter algorithms (cuDNN's heuristics, or timed with
  /// --cudnn-benchmark) and their descriptors; returns them described for the log.
  std::string choose_algorithms(const ConvolutionDesc& query, const std::string& key) {
    cudnnHandle_t handle = be_.cudnn();
    const bool bench = be_.cudnn_benchmark();
    const bool det = be_.deterministic();
    const std::size_t limit = workspace_limit();
    std::string chosen;
    int max = 0;
    DT_CHECK_CUDNN(cudnnGetConvolutionForwardAlgorithmMaxCount(handle, &max));
    const auto f = choose<cudnnConvolutionFwdAlgoPerf_t>(
        max, bench, "forward", key, tf32_, det, limit,
        [&](int n, int* got, cudnnConvolutionFwdAlgoPerf_t* r) {
          return bench ? cudnnFindConvolutionForwardAlgorithm(handle, x_desc_, w_desc_, query,
                                                              y_desc_, n, got, r)
                       : cudnnGetConvolutionForwardAlgorithm_v7(handle, x_desc_, w_desc_, query,
                                                                y_desc_, n, got, r);
        });
    fwd_algo_ = f.algo;
    if (bench) legacy_ms_[0] = f.time;
    fwd_desc_ = conv_desc(f.mathType);
    chosen += describe("fwd", f);
    DT_CHECK_CUDNN(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(handle, &max));
    const auto bd = choose<cudnnConvolutionBwdDataAlgoPerf_t>(
        max, bench, "backward-data", key, tf32_, det, limit,
        [&](int n, int* got, cudnnConvolutionBwdDataAlgoPerf_t* r) {
          return bench ? cudnnFindConvolutionBackwardDataAlgorithm(handle, w_desc_, y_desc_, query,
                                                                   x_desc_, n, got, r)
                       : cudnnGetConvolutionBackwardDataAlgorithm_v7(handle, w_desc_, y_desc_,
                                                                     query, x_desc_, n, got, r);
        });
    bwd_data_algo_ = bd.algo;
    if (bench) legacy_ms_[1] = bd.time;
    bwd_data_desc_ = conv_desc(bd.mathType);
    chosen += ", " + describe("bwd-data", bd);
    DT_CHECK_CUDNN(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(handle, &max));
    const auto bf = choose<cudnnConvolutionBwdFilterAlgoPerf_t>(
        max, bench, "backward-filter", key, tf32_, det, limit,
        [&](int n, int* got, cudnnConvolutionBwdFilterAlgoPerf_t* r) {
          return bench ? cudnnFindConvolutionBackwardFilterAlgorithm(handle, x_desc_, y_desc_,
                                                                     query, w_desc_, n, got, r)
                       : cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle, x_desc_, y_desc_,
                                                                       query, w_desc_, n, got, r);
        });
    bwd_filter_algo_ = bf.algo;
    if (bench) legacy_ms_[2] = bf.time;
    bwd_filter_desc_ = conv_desc(bf.mathType);
    return chosen + ", " + describe("bwd-filter", bf);
  }

  /// Reserves the backend's workspace for the descriptors actually used (the heuristics'
  /// estimates may differ).
  void reserve_workspace() {
    cudnnHandle_t handle = be_.cudnn();
    std::size_t fwd = 0, bd = 0, bf = 0;
    DT_CHECK_CUDNN(cudnnGetConvolutionForwardWorkspaceSize(handle, x_desc_, w_desc_, fwd_desc_,
                                                           y_desc_, fwd_algo_, &fwd));
    DT_CHECK_CUDNN(cudnnGetConvolutionBackwardDataWorkspaceSize(
        handle, w_desc_, y_desc_, bwd_data_desc_, x_desc_, bwd_data_algo_, &bd));
    DT_CHECK_CUDNN(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        handle, x_desc_, y_desc_, bwd_filter_desc_, w_desc_, bwd_filter_algo_, &bf));
    std::size_t need = std::max(fwd, std::max(bd, bf));
    for (const auto& p : plans_)
      if (p) need = std::max(need, p->workspace_bytes());
    if (fused_) need = std::max(need, fused_->workspace_bytes());
    be_.reserve_workspace(need);
  }

  /// --conv-api graph: the graph plan of each direction (from the backend's cache, built on
  /// first use); `legacy` is choose_algorithms()'s description. Returns what each direction runs.
  std::string choose_graph_plans(const std::string& legacy) {
    std::string chosen = "graph API:";
    for (ConvDirection d : {ConvDirection::fprop, ConvDirection::dgrad, ConvDirection::wgrad})
      chosen += std::string(d == ConvDirection::fprop ? " " : ", ") + direction_name(d) + " " +
                select_graph_plan(d);
    return chosen + "; legacy fallback: " + legacy;
  }

  /// Sets direction d's graph plan (nullptr: the legacy call) and describes the choice. With
  /// --cudnn-benchmark a timed plan slower than the timed legacy algorithm is not used.
  std::string select_graph_plan(ConvDirection d) {
    std::string why;
    plan(d) = graph_plan(d, &why);
    if (!plan(d)) return "legacy (" + why + ")";
    const float graph_ms = plan(d)->timed_ms(), legacy_ms = legacy_ms_[static_cast<int>(d)];
    if (graph_ms > legacy_ms) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "legacy (timed faster: %.3f ms against the graph's %.3f)",
                    double(legacy_ms), double(graph_ms));
      plan(d) = nullptr;
      return buf;
    }
    return plan(d)->description();
  }

  /// --conv-api graph with --fuse auto: the forward with its bias and/or relu in the same graph
  /// (fused_; nullptr without either, with --fuse off, or when no engine builds it). Returns the
  /// choice for the log.
  std::string select_fused_plan() {
    fused_ = nullptr;
    if (!be_.fuse() || !(bias_ || relu_)) return "no fused epilogue";
    const std::string what = std::string("fwd") + (bias_ ? "+bias" : "") + (relu_ ? "+relu" : "");
    ConvProblem prob = problem();
    prob.bias = bias_;
    prob.relu = relu_;
    std::string why;
    fused_ = cached_plan(what, prob, ConvDirection::fprop, 0.0f, &why);
    if (!fused_) return what + " unfused (" + why + ")";
    if (bias_ && !bias_copy_) bias_copy_ = DeviceMemory::create(desc_.out_channels * sizeof(float));
    return what + " fused: " + fused_->description();
  }

  /// --conv-api graph: chooses the fused epilogue (select_fused_plan) for the bias and relu as
  /// they now are, grows the workspace to it and logs the choice.
  void settle_epilogue() {
    epilogue_pending_ = false;
    const std::string chosen = select_fused_plan();
    reserve_workspace();
    log_once("cuDNN conv " + problem_key() + (relu_ ? ", relu fused" : "") + ": " + chosen);
  }

  /// Queues the fused forward (fused_): the bias copied into its aligned buffer first. False
  /// when there is none or an address is not aligned (the caller runs the unfused forward).
  bool run_fused(const void* x, const void* f, const float* b, void* y) {
    if (!fused_ || !GraphConvCall::aligned(x) ||
        !GraphConvCall::aligned(f, fused_->w_alignment()) || !GraphConvCall::aligned(y))
      return false;
    if (bias_) be_.copy_device(bias_copy_.get(), b, desc_.out_channels * sizeof(float));
    fused_call_.run(be_.cudnn(), *fused_, x, f, y, be_.workspace(),
                    bias_ ? bias_copy_.get() : nullptr);
    return true;
  }

  /// This convolution as conv_graph.hpp describes it (no epilogue). The model's own fp32 weights
  /// (no copy) lie at any float offset of the parameter buffer.
  [[nodiscard]] ConvProblem problem() const {
    return ConvProblem{desc_.input,  w_shape_, desc_.output(),   desc_.stride, desc_.pad,
                       be_.layout(), t_,       copies() ? 16 : 4};
  }
  [[nodiscard]] EnginePolicy engine_policy() const {
    return EnginePolicy{t_ == DType::f32, tf32_, be_.deterministic(), true, workspace_limit()};
  }

  /// Direction d's graph plan for this problem at the current β (nullptr with *why when none).
  std::shared_ptr<const GraphConvPlan> graph_plan(ConvDirection d, std::string* why) {
    const float beta = d == ConvDirection::dgrad ? dx_beta_ : 0.0f;
    return cached_plan(std::string(direction_name(d)) + (beta != 0.0f ? " beta=1" : ""), problem(),
                       d, beta, why);
  }

  /// `prob` in direction d at β from the backend's plan cache, built on first use; keyed by this
  /// convolution's problem, `what` and whether plans are timed (nullptr with *why when none).
  std::shared_ptr<const GraphConvPlan> cached_plan(const std::string& what, const ConvProblem& prob,
                                                   ConvDirection d, float beta, std::string* why) {
    const bool bench = be_.cudnn_benchmark();
    const EnginePolicy policy = engine_policy();
    return be_.conv_plans().get(
        problem_key() + " " + what + (bench ? " timed" : ""), why, [&](std::string* w) {
          return GraphConvPlan::build(be_.cudnn(), prob, d, beta, policy, bench, w);
        });
  }

  std::shared_ptr<const GraphConvPlan>& plan(ConvDirection d) {
    return plans_[static_cast<int>(d)];
  }

  /// Queues direction d through its graph plan with the x-, w- and y-shaped tensors; false when
  /// it has none or an address is not aligned (the caller runs the legacy call instead).
  bool run_graph(ConvDirection d, const void* x, const void* w, const void* y) {
    const auto& p = plan(d);
    if (!p) return false;
    if (!GraphConvCall::aligned(x) || !GraphConvCall::aligned(w, p->w_alignment()) ||
        !GraphConvCall::aligned(y)) {
      log_once("cuDNN conv " + problem_key() + ": " + direction_name(d) +
               " takes the legacy call (a tensor not 16-byte aligned)");
      return false;
    }
    calls_[static_cast<int>(d)].run(be_.cudnn(), *p, x, w, y, be_.workspace());
    return true;
  }

  /// Whether filter() makes a copy (bf16 and/or KRSC) rather than returning w.
  [[nodiscard]] bool copies() const { return krsc_ || t_ != DType::f32; }
  /// The copy filter() made last (its buffers still hold it); only when copies().
  [[nodiscard]] const void* converted() const { return krsc_ ? w_krsc_.get() : w_lp_.get(); }

  CudaBackend& be_;
  ConvDesc desc_;         ///< the convolution, as made
  bool tf32_ = false;     ///< tensor-op math allowed (--math tf32, or bf16)
  DType t_ = DType::f32;  ///< activations and the filter cuDNN reads
  TensorDesc x_desc_, y_desc_;
  FilterDesc w_desc_;
  Shape w_shape_;                  ///< K×C×R×S
  bool krsc_ = false;              ///< the filter is converted to KRSC (NHWC, R·S > 1, C > 1)
  DeviceMemory w_krsc_, dw_krsc_;  ///< the KRSC filter and gradient (krsc_ only)
  DeviceMemory w_lp_, dw_lp_;      ///< bf16 KCRS filter and gradient (bf16 only)
  bool filter_ready_ = false;      ///< forward left the converted filter in w_krsc_ / w_lp_
  ConvolutionDesc fwd_desc_, bwd_data_desc_, bwd_filter_desc_;
  cudnnConvolutionFwdAlgo_t fwd_algo_{};
  cudnnConvolutionBwdDataAlgo_t bwd_data_algo_{};
  cudnnConvolutionBwdFilterAlgo_t bwd_filter_algo_{};
  bool bias_ = true;
  bool relu_ = false;              ///< enable_relu(): y = max(conv + b, 0)
  std::size_t out_count_ = 0;      ///< elements of y
  float dx_beta_ = 0.0f;           ///< 1: backward adds into dx (set_accumulate_dx)
  bool graph_api_ = false;         ///< made with --conv-api graph
  bool epilogue_pending_ = false;  ///< --conv-api graph: settle_epilogue() not run yet
  /// --cudnn-benchmark: the legacy algorithms' timed milliseconds per direction (else +inf).
  float legacy_ms_[3] = {kNotTimed, kNotTimed, kNotTimed};
  /// --conv-api graph: each direction's plan (nullptr: the legacy call) and its call site.
  std::shared_ptr<const GraphConvPlan> plans_[3];
  GraphConvCall calls_[3];
  /// The forward with its bias and/or relu as one graph (select_fused_plan), its call site and
  /// the 16-byte aligned copy of the bias it reads.
  std::shared_ptr<const GraphConvPlan> fused_;
  GraphConvCall fused_call_;
  DeviceMemory bias_copy_;
  ChannelShape out_shape_;
  DeviceMemory bias_scratch_;
};

}  // namespace

std::unique_ptr<ConvOp> make_cuda_conv(CudaBackend& be, const ConvDesc& d) {
  return std::make_unique<CudaConvOp>(be, d);
}

}  // namespace dtrain::cuda
