// src/model/memory_plan.hpp (private) — the activation-memory plan of a Model: where, in one
// arena, each activation and each activation gradient lives during one training step.
//
// Time runs forward over the layers, then the loss, then backward in reverse. A tensor is live
// from the op that writes it to the last op that reads it: its consumers' forward, plus the
// backward of whoever needs it there (Layer::needs(): the producer reading y, a consumer reading
// x). A layer that allows it runs in place over an input that has no other reader. Offsets are
// then assigned offline, largest tensor first, each at the lowest offset free over its whole
// lifetime ("greedy by size", Pisarchyk & Lee 2020, as in TensorFlow Lite's arena planner).
#pragma once

#include <cstddef>
#include <limits>
#include <vector>

#include "dtrain/layers/layer.hpp"

namespace dtrain {

inline constexpr std::size_t kNoSlot = std::numeric_limits<std::size_t>::max();

/// One layer as the planner sees it.
struct PlanNode {
  std::vector<int> inputs;   ///< tensor ids: 0 = network input, i + 1 = output of layer i
  std::size_t out_elements;  ///< output size at the largest batch
  BackwardNeeds needs;
  /// A relu run inside the layer before it (Layer::absorb_relu): its input is that layer's output
  /// alone, its output and that output share one buffer, and so do their gradients; it does not
  /// run, and its producer reads the shared output in backward (the producer's needs.output).
  bool absorbed = false;
  /// The layer's backward can add into its one input's gradient (Layer::can_accumulate_dx).
  bool can_accumulate = false;
  /// The layer runs here. A pipeline stage plans only its own layers (Model's LayerRange): the
  /// others get no buffers; what they produce and this stage reads arrives from the stage before.
  bool active = true;
};

/// Where one layer's backward writes each input gradient (arena offsets in elements).
struct PlanStep {
  std::vector<std::size_t> dx;   ///< per input; kNoSlot for the network input
  std::vector<bool> accumulate;  ///< true: dx is scratch, to be added to the input's gradient
  /// true: dx is the input's gradient itself, which the layer adds into (set_accumulate_dx).
  std::vector<bool> adds_in_place;
};

struct MemoryPlan {
  std::vector<std::size_t> act;    ///< per tensor id: arena offset of its value (entry 0 unused)
  std::vector<std::size_t> grad;   ///< per tensor id: arena offset of its gradient (entry 0 unused)
  std::vector<PlanStep> backward;  ///< per layer
  std::size_t total_elements = 0;  ///< arena size
  std::size_t peak_live_elements = 0;  ///< most elements live at once (a lower bound of the total)
  std::size_t buffers = 0;             ///< tensors placed
};

/// Plans the layers (in execution order; inputs refer to earlier layers only).
///
/// A pipeline stage (some nodes inactive): every tensor an active layer reads from an inactive one
/// (`received`) gets a buffer from the start of the step, and its gradient one live to the end
/// (sent back to the stage before). Each tensor in `sent` (produced here or received, read by a
/// later stage) stays live to the end of forward; its gradient arrives then, in place of the
/// loss's (`sent` empty: the last active layer's output feeds the loss).
MemoryPlan plan_memory(const std::vector<PlanNode>& nodes, const std::vector<int>& sent = {});

}  // namespace dtrain
