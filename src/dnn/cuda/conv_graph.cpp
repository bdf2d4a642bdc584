// src/dnn/cuda/conv_graph.cpp — convolution plans through cuDNN's graph API (conv_graph.hpp).
// The sequence is the one cuDNN's documentation gives for a single operation: tensor and
// convolution descriptors → operation → operation graph → engine heuristics → engine
// configuration → execution plan → variant pack → cudnnBackendExecute.
#include "conv_graph.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <utility>

#include "cuda_raii.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain::cuda {

/// The descriptors a plan was built from, kept alive with it.
struct GraphConvPlan::Parts {
  BackendDesc x, w, y, conv, op, graph, cfg;
  std::vector<BackendDesc> epilogue;  ///< the fused bias / relu: tensors, pointwise descriptors
};

GraphConvPlan::GraphConvPlan(std::shared_ptr<Parts> parts, BackendDesc plan, std::size_t workspace,
                             std::string description, std::int64_t w_alignment, float timed_ms)
    : parts_(std::move(parts)), plan_(std::move(plan)), workspace_(workspace),
      description_(std::move(description)), w_alignment_(w_alignment), timed_ms_(timed_ms) {}

const char* direction_name(ConvDirection d) {
  switch (d) {
    case ConvDirection::fprop:
      return "fwd";
    case ConvDirection::dgrad:
      return "bwd-data";
    case ConvDirection::wgrad:
      return "bwd-filter";
  }
  return "?";
}

namespace {

// The handle attributes carry a deprecation mark in recent cuDNN 9 headers (device properties
// replace them), but the cuDNN 9 libraries GPU machines have (PyTorch's wheels) may predate
// the replacement; every cuDNN 9 accepts these.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
constexpr cudnnBackendAttributeName_t kGraphHandle = CUDNN_ATTR_OPERATIONGRAPH_HANDLE;
constexpr cudnnBackendAttributeName_t kPlanHandle = CUDNN_ATTR_EXECUTION_PLAN_HANDLE;
#pragma GCC diagnostic pop

/// The tensors' unique ids in every graph and variant pack (virtual ones from kUidVirtual on).
constexpr std::int64_t kUidX = 1, kUidW = 2, kUidY = 3, kUidB = 4, kUidVirtual = 100;
cudnnDataType_t cudnn_type(DType t) {
  return t == DType::bf16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/// A finalized tensor descriptor: dims in N, C, H, W order, strides of `layout`, addresses
/// multiples of `alignment` bytes.
BackendDesc tensor(std::int64_t uid, const Shape& s, Layout layout, DType t, std::int64_t alignment,
                   bool is_virtual = false) {
  const std::int64_t c = s.c, h = s.h, w = s.w;
  const std::vector<std::int64_t> strides = layout == Layout::nhwc
                                                ? std::vector<std::int64_t>{h * w * c, 1, w * c, c}
                                                : std::vector<std::int64_t>{c * h * w, h * w, w, 1};
  BackendDesc d(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  d.set_data_type(CUDNN_ATTR_TENSOR_DATA_TYPE, cudnn_type(t))
      .set_i64(CUDNN_ATTR_TENSOR_DIMENSIONS, {s.n, c, h, w})
      .set_i64(CUDNN_ATTR_TENSOR_STRIDES, strides)
      .set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid)
      .set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment)
      .set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &is_virtual);
  d.finalize();
  return d;
}

/// Cross-correlation with fp32 accumulation, the problem's strides and symmetric padding.
BackendDesc convolution(const ConvProblem& p) {
  const std::int64_t dims = 2;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  BackendDesc d(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  d.set_data_type(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_DATA_FLOAT)
      .set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode)
      .set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &dims)
      .set_i64(CUDNN_ATTR_CONVOLUTION_DILATIONS, {1, 1})
      .set_i64(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, {p.stride.h, p.stride.w})
      .set_i64(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, {p.pad.h, p.pad.w})
      .set_i64(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, {p.pad.h, p.pad.w});
  d.finalize();
  return d;
}

/// The operation of `dir` over the parts' tensors and convolution: out = 1·conv + β·out; a
/// fused fprop writes `y` (the virtual fp32 input of its epilogue) instead of p.y.
BackendDesc operation(ConvDirection dir, const GraphConvPlan::Parts& p, float beta,
                      const BackendDesc* y = nullptr) {
  struct Names {
    cudnnBackendDescriptorType_t type;
    cudnnBackendAttributeName_t alpha, beta, conv, x, w, y;
  };
  static constexpr Names kFprop{CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y};
  static constexpr Names kDgrad{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY};
  static constexpr Names kWgrad{CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY};
  const Names& n = dir == ConvDirection::fprop   ? kFprop
                   : dir == ConvDirection::dgrad ? kDgrad
                                                 : kWgrad;
  BackendDesc op(n.type);
  op.set_float(n.alpha, 1.0f)
      .set_float(n.beta, beta)
      .set_desc(n.conv, p.conv)
      .set_desc(n.x, p.x)
      .set_desc(n.w, p.w)
      .set_desc(n.y, y != nullptr ? *y : p.y);
  op.finalize();
  return op;
}

/// The engine configurations cuDNN's heuristics of `mode` rank for `graph`, best first.
std::vector<BackendDesc> ranked_configs(const BackendDesc& graph, cudnnBackendHeurMode_t mode) {
  BackendDesc heur(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  heur.set_desc(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, graph)
      .set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
  if (heur.try_finalize() != CUDNN_STATUS_SUCCESS) return {};
  std::int64_t count = 0;
  DT_CHECK_CUDNN(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr));
  std::vector<BackendDesc> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < count; ++i) {
    cfgs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(cfgs.back().get());
  }
  std::int64_t got = 0;
  DT_CHECK_CUDNN(cudnnBackendGetAttribute(heur.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, raw.data()));
  cfgs.resize(static_cast<std::size_t>(std::clamp<std::int64_t>(got, 0, count)));
  return cfgs;
}

/// What the rule needs of a configuration's engine, its global index and whether cuDNN compiles
/// it at run time (NVRTC).
struct EngineInfo {
  EngineNotes notes;
  std::int64_t index = -1;
  bool runtime_compiled = false;
};

EngineInfo engine_info(const BackendDesc& cfg) {
  EngineInfo info;
  BackendDesc engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  std::int64_t got = 0;
  DT_CHECK_CUDNN(cudnnBackendGetAttribute(cfg.get(), CUDNN_ATTR_ENGINECFG_ENGINE,
                                          CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &got, &raw));
  cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &got,
                           &info.index);
  cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
  got = 0;
  if (cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                               CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &got,
                               notes) == CUDNN_STATUS_SUCCESS)
    for (std::int64_t i = 0; i < std::min<std::int64_t>(got, CUDNN_NUMERICAL_NOTE_TYPE_COUNT);
         ++i) {
      info.notes.tensor_core |= notes[i] == CUDNN_NUMERICAL_NOTE_TENSOR_CORE;
      info.notes.down_convert |= notes[i] == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS;
      info.notes.nondeterministic |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
    }
  cudnnBackendBehaviorNote_t behavior[CUDNN_BEHAVIOR_NOTE_TYPE_COUNT];
  got = 0;
  if (cudnnBackendGetAttribute(raw, CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                               CUDNN_BEHAVIOR_NOTE_TYPE_COUNT, &got,
                               behavior) == CUDNN_STATUS_SUCCESS)
    for (std::int64_t i = 0; i < std::min<std::int64_t>(got, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT); ++i)
      info.runtime_compiled |= behavior[i] == CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION;
  return info;
}

/// "engine 42 (tensor core, nondeterministic, 12 MiB)"
std::string describe(const EngineInfo& e) {
  std::string s = "engine " + std::to_string(e.index) + " (";
  s += e.notes.tensor_core ? "tensor core" : "fma";
  if (e.notes.nondeterministic) s += ", nondeterministic";
  if (e.runtime_compiled) s += ", runtime-compiled";
  return s + ", " + std::to_string(e.notes.workspace_bytes >> 20) + " MiB)";
}

/// One configuration that finalized into a plan.
struct Candidate {
  BackendDesc cfg, plan;
  EngineInfo info;
};

/// The plan of `cfg` on `h`, or nothing when this configuration does not build here.
bool finalize_plan(cudnnHandle_t h, BackendDesc& cfg, Candidate* out) {
  BackendDesc plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
  plan.set_handle(kPlanHandle, h).set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, cfg);
  if (plan.try_finalize() != CUDNN_STATUS_SUCCESS) return false;
  std::int64_t ws = 0, got = 0;
  DT_CHECK_CUDNN(cudnnBackendGetAttribute(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                          CUDNN_TYPE_INT64, 1, &got, &ws));
  out->info.notes.workspace_bytes = static_cast<std::size_t>(std::max<std::int64_t>(ws, 0));
  out->plan = std::move(plan);
  out->cfg = std::move(cfg);
  return true;
}

/// The configurations of `graph` that `policy` accepts and that build, in cuDNN's order (at most
/// `limit`): heuristics mode A, then the FALLBACK list when A gives nothing usable. Reasons for
/// the rejected ones are added to *why.
std::vector<Candidate> candidates(cudnnHandle_t h, const BackendDesc& graph,
                                  const EnginePolicy& policy, std::size_t limit, std::string* why) {
  std::vector<Candidate> out;
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    for (BackendDesc& cfg : ranked_configs(graph, mode)) {
      Candidate c;
      c.info = engine_info(cfg);
      // The notes first: finalizing may compile the engine (NVRTC), not worth it for a reject.
      std::string no = engine_rejection(c.info.notes, policy);
      if (no.empty() && !finalize_plan(h, cfg, &c)) continue;
      if (no.empty()) no = engine_rejection(c.info.notes, policy);  // its workspace now known
      if (!no.empty()) {
        if (why->size() < 400) *why += " engine " + std::to_string(c.info.index) + ": " + no + ";";
        continue;
      }
      out.push_back(std::move(c));
      if (out.size() >= limit) return out;
    }
    if (!out.empty()) return out;
  }
  return out;
}

/// Bytes of a tensor of shape s and element type t.
std::size_t bytes_of(const Shape& s, DType t) { return s.count() * dtype_size(t); }

/// A finalized variant pack: the x-, w- and y-shaped tensors' addresses, the bias's (unless
/// b is nullptr) and the workspace.
BackendDesc variant_pack(const void* x, const void* w, const void* y, void* workspace,
                         const void* b) {
  const std::int64_t uids[4] = {kUidX, kUidW, kUidY, kUidB};
  void* ptrs[4] = {const_cast<void*>(x), const_cast<void*>(w), const_cast<void*>(y),
                   const_cast<void*>(b)};
  const std::int64_t n = b != nullptr ? 4 : 3;
  BackendDesc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids)
      .set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs)
      .set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &workspace);
  pack.finalize();
  return pack;
}

/// Mean milliseconds of 3 runs of each candidate (after one untimed run) on zeroed scratch
/// tensors; +infinity for one that fails to run.
std::vector<float> time_candidates(cudnnHandle_t h, const ConvProblem& p, bool with_bias,
                                   const std::vector<Candidate>& cands) {
  std::size_t ws = 0;
  for (const Candidate& c : cands) ws = std::max(ws, c.info.notes.workspace_bytes);
  const auto zeroed = [](std::size_t bytes) {
    DeviceMemory m = DeviceMemory::create(bytes);
    if (bytes > 0) DT_CHECK_CUDA(cudaMemset(m.get(), 0, bytes));
    return m;
  };
  const DeviceMemory x = zeroed(bytes_of(p.x, p.dtype)), w = zeroed(bytes_of(p.w, p.dtype));
  const DeviceMemory y = zeroed(bytes_of(p.y, p.dtype)), scratch = DeviceMemory::create(ws);
  const DeviceMemory b = zeroed(with_bias ? p.y.c * sizeof(float) : 0);
  cudaStream_t stream = nullptr;
  DT_CHECK_CUDNN(cudnnGetStream(h, &stream));
  const Event start = Event::create_timed(), stop = Event::create_timed();
  const BackendDesc pack = variant_pack(x.get(), w.get(), y.get(), scratch.get(), b.get());
  std::vector<float> ms;
  for (const Candidate& c : cands) {
    const auto run = [&] { return cudnnBackendExecute(h, c.plan.get(), pack.get()); };
    float t = std::numeric_limits<float>::infinity();
    if (run() == CUDNN_STATUS_SUCCESS) {
      DT_CHECK_CUDA(cudaEventRecord(start, stream));
      bool ok = true;
      for (int i = 0; i < 3; ++i) ok = ok && run() == CUDNN_STATUS_SUCCESS;
      DT_CHECK_CUDA(cudaEventRecord(stop, stream));
      DT_CHECK_CUDA(cudaEventSynchronize(stop));
      float elapsed = 0.0f;
      DT_CHECK_CUDA(cudaEventElapsedTime(&elapsed, start, stop));
      if (ok) t = elapsed / 3.0f;
    }
    ms.push_back(t);
  }
  DT_CHECK_CUDA(cudaStreamSynchronize(stream));
  return ms;
}

/// A pointwise operation `mode` (fp32 math): y = mode(x) or mode(x, b).
BackendDesc pointwise(cudnnPointwiseMode_t mode, const BackendDesc& x, const BackendDesc* b,
                      const BackendDesc& y, std::vector<BackendDesc>* keep) {
  BackendDesc pw(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
  pw.set(CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode)
      .set_data_type(CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_DATA_FLOAT);
  pw.finalize();
  BackendDesc op(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw)
      .set_desc(CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
  if (b != nullptr) op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_BDESC, *b);
  op.set_desc(CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
  op.finalize();
  keep->push_back(std::move(pw));
  return op;
}

/// The fprop epilogue of p (bias and/or relu) after the convolution's virtual fp32 result `conv_y`,
/// ending in the real y: its operations, in order; their descriptors kept in parts.epilogue.
std::vector<cudnnBackendDescriptor_t> epilogue_ops(const ConvProblem& p,
                                                   GraphConvPlan::Parts& parts,
                                                   const BackendDesc& conv_y) {
  std::vector<BackendDesc>& keep = parts.epilogue;
  keep.reserve(12);  // no reallocation: the operations refer to the tensors by handle
  std::vector<cudnnBackendDescriptor_t> ops;
  const BackendDesc* in = &conv_y;
  if (p.bias) {
    const Shape bs{1, p.y.c, 1, 1};
    keep.push_back(tensor(kUidB, bs, p.layout, DType::f32, GraphConvCall::kAlignment));
    const BackendDesc& b = keep.back();
    if (p.relu) keep.push_back(tensor(kUidVirtual + 1, p.y, p.layout, DType::f32, 16, true));
    const BackendDesc& out = p.relu ? keep.back() : parts.y;
    keep.push_back(pointwise(CUDNN_POINTWISE_ADD, *in, &b, out, &keep));
    ops.push_back(keep.back().get());
    in = &out;
  }
  if (p.relu) {
    keep.push_back(pointwise(CUDNN_POINTWISE_RELU_FWD, *in, nullptr, parts.y, &keep));
    ops.push_back(keep.back().get());
  }
  return ops;
}

/// The problem's descriptors up to its finalized operation graph on h.
std::shared_ptr<GraphConvPlan::Parts> graph_of(cudnnHandle_t h, const ConvProblem& p,
                                               ConvDirection dir, float beta) {
  auto parts = std::make_shared<GraphConvPlan::Parts>();
  constexpr std::int64_t a = GraphConvCall::kAlignment;
  const bool fused = dir == ConvDirection::fprop && (p.bias || p.relu);
  parts->x = tensor(kUidX, p.x, p.layout, p.dtype, a);
  parts->w = tensor(kUidW, p.w, p.layout, p.dtype, p.w_alignment);
  parts->y = tensor(kUidY, p.y, p.layout, p.dtype, a);
  parts->conv = convolution(p);
  // Fused, the convolution writes a virtual fp32 tensor that the epilogue reads.
  BackendDesc conv_y =
      fused ? tensor(kUidVirtual, p.y, p.layout, DType::f32, a, true) : BackendDesc();
  parts->op = operation(dir, *parts, beta, fused ? &conv_y : nullptr);
  std::vector<cudnnBackendDescriptor_t> ops{parts->op.get()};
  if (fused) {
    for (cudnnBackendDescriptor_t op : epilogue_ops(p, *parts, conv_y)) ops.push_back(op);
    parts->epilogue.push_back(std::move(conv_y));
  }
  parts->graph = BackendDesc(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  parts->graph.set_handle(kGraphHandle, h)
      .set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
           static_cast<std::int64_t>(ops.size()), ops.data());
  parts->graph.finalize();
  return parts;
}

}  // namespace

std::shared_ptr<const GraphConvPlan> GraphConvPlan::build_plan(cudnnHandle_t h,
                                                               const ConvProblem& prob,
                                                               ConvDirection dir, float beta,
                                                               const EnginePolicy& policy,
                                                               bool benchmark, std::string* why) {
  std::shared_ptr<Parts> parts = graph_of(h, prob, dir, beta);
  const std::size_t limit = benchmark ? kTimedConfigs : 1;
  std::string reasons;
  std::vector<Candidate> cands = candidates(h, parts->graph, policy, limit, &reasons);
  if (cands.empty() && policy.deterministic) {  // no deterministic engine: any that fits
    EnginePolicy relaxed = policy;
    relaxed.strict = false;
    cands = candidates(h, parts->graph, relaxed, limit, &reasons);
  }
  if (cands.empty()) {
    *why = "no engine of cuDNN's heuristics builds and qualifies" +
           (reasons.empty() ? std::string() : ":" + reasons);
    return nullptr;
  }
  std::size_t best = 0;
  std::string timed;
  float best_ms = std::numeric_limits<float>::infinity();
  if (benchmark) {
    const bool with_bias = dir == ConvDirection::fprop && prob.bias;
    const std::vector<float> ms = time_candidates(h, prob, with_bias, cands);
    best = static_cast<std::size_t>(std::min_element(ms.begin(), ms.end()) - ms.begin());
    best_ms = ms[best];
    char buf[64];
    std::snprintf(buf, sizeof buf, ", %.3f ms of %zu timed", double(ms[best]), ms.size());
    timed = buf;
  }
  Candidate& c = cands[best];
  std::string description = describe(c.info);
  description.insert(description.size() - 1, timed);
  parts->cfg = std::move(c.cfg);
  return std::make_shared<GraphConvPlan>(std::move(parts), std::move(c.plan),
                                         c.info.notes.workspace_bytes, std::move(description),
                                         prob.w_alignment, best_ms);
}

std::shared_ptr<const GraphConvPlan> GraphConvPlan::build(cudnnHandle_t h, const ConvProblem& prob,
                                                          ConvDirection dir, float beta,
                                                          const EnginePolicy& policy,
                                                          bool benchmark, std::string* why) {
  try {  // cuDNN may refuse the graph itself (an epilogue this version cannot fuse), or a query
    return build_plan(h, prob, dir, beta, policy, benchmark, why);
  } catch (const Error& e) {
    *why = std::string("cuDNN refused: ") + e.what();
    return nullptr;
  }
}

bool GraphConvCall::aligned(const void* p, std::int64_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % static_cast<std::uintptr_t>(bytes) == 0;
}

void GraphConvCall::run(cudnnHandle_t h, const GraphConvPlan& plan, const void* x, const void* w,
                        const void* y, void* workspace, const void* b) {
  const std::array<const void*, 5> ptrs{x, w, y, workspace, b};
  if (plan_ != &plan || ptrs != ptrs_) {
    pack_ = variant_pack(x, w, y, workspace, b);
    plan_ = &plan;
    ptrs_ = ptrs;
  }
  DT_CHECK_CUDNN(cudnnBackendExecute(h, plan.plan(), pack_.get()));
}

}  // namespace dtrain::cuda
