// src/dnn/cuda/conv_engine_rule.hpp — which of the engines cuDNN's graph-API heuristics rank
// (conv_graph.hpp) a convolution may run, from what the engine's notes say about it
// (CUDNN_ATTR_ENGINE_NUMERICAL_NOTE / _BEHAVIOR_NOTE) and the workspace its plan needs. The same
// filter as the legacy algorithm pick (conv_op.cpp pick_algorithm) and as PyTorch's cuDNN v8
// convolution path: no engine that down-converts its inputs, no tensor cores for fp32 data unless
// TF32 is allowed (--math tf32), no non-deterministic engine while one deterministic engine fits
// (--deterministic true), nothing above the workspace limit (--conv-workspace-mb). Free of cuDNN
// types, so the rule is tested on machines without a GPU (tests/unit/test_conv_graph_rule.cpp).
#pragma once

#include <cstddef>
#include <string>

namespace dtrain::cuda {

/// One engine configuration as the rule sees it.
struct EngineNotes {
  bool tensor_core = false;         ///< CUDNN_NUMERICAL_NOTE_TENSOR_CORE (TF32 on fp32 data)
  bool down_convert = false;        ///< CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS
  bool nondeterministic = false;    ///< CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC
  std::size_t workspace_bytes = 0;  ///< CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE of its plan
};

/// What the convolution allows.
struct EnginePolicy {
  bool fp32_data = true;            ///< x, w and y are fp32 (false: bf16, tensor cores always)
  bool allow_tf32 = false;          ///< fp32 data may run on tensor cores (--math tf32)
  bool deterministic = false;       ///< prefer deterministic engines (--deterministic true)
  bool strict = true;               ///< this pass refuses non-deterministic engines (see below)
  std::size_t workspace_limit = 0;  ///< bytes
};

/// Why `e` may not run under `p` ("" when it may). With p.deterministic the caller makes a
/// strict pass over the ranked list first and, when nothing passes, a second with strict = false,
/// which accepts non-deterministic engines (the legacy pick's "a deterministic algorithm when one
/// fits, else the first fitting one").
inline std::string engine_rejection(const EngineNotes& e, const EnginePolicy& p) {
  if (e.down_convert) return "down-converts its inputs";
  if (p.fp32_data && !p.allow_tf32 && e.tensor_core) return "tensor cores on fp32 data";
  if (p.deterministic && p.strict && e.nondeterministic) return "non-deterministic";
  if (e.workspace_bytes > p.workspace_limit)
    return "needs " + std::to_string((e.workspace_bytes + (1u << 20) - 1) >> 20) +
           " MiB of workspace (limit " + std::to_string(p.workspace_limit >> 20) + " MiB)";
  return "";
}

}  // namespace dtrain::cuda
