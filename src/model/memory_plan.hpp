// src/model/memory_plan.hpp (private) — the activation-memory plan of a Model: which shared slot
// holds each activation and each activation gradient during one training step.
//
// Time runs forward over the layers, then the loss, then backward in reverse. A tensor occupies a
// slot from the op that writes it to the last op that reads it: its consumers' forward, plus the
// backward of whoever needs it there (Layer::needs(): the producer reading y, a consumer reading
// x). A layer that allows it runs in place over an input that has no other reader. Slots are
// reused best-fit (the smallest free slot that is large enough, else the largest free one, grown),
// the greedy interval packing frameworks use for static graphs (e.g. MXNet's memory planner).
#pragma once

#include <cstddef>
#include <limits>
#include <vector>

#include "dtrain/layers/layer.hpp"

namespace dtrain {

inline constexpr std::size_t kNoSlot = std::numeric_limits<std::size_t>::max();

/// One layer as the planner sees it.
struct PlanNode {
  std::vector<int> inputs;  ///< tensor ids: 0 = network input, i + 1 = output of layer i
  std::size_t out_floats;   ///< output size at the largest batch
  BackwardNeeds needs;
};

/// Where one layer's backward writes each input gradient.
struct PlanStep {
  std::vector<std::size_t> dx_slot;  ///< per input; kNoSlot for the network input
  std::vector<bool> accumulate;      ///< true: dx_slot is scratch, to be added to the gradient
};

struct MemoryPlan {
  std::vector<std::size_t> act_slot;   ///< per tensor id (entry 0 unused)
  std::vector<std::size_t> grad_slot;  ///< per tensor id: its gradient (entry 0 unused)
  std::vector<PlanStep> backward;      ///< per layer
  std::vector<std::size_t> slot_floats;
  [[nodiscard]] std::size_t total_floats() const {
    std::size_t t = 0;
    for (std::size_t s : slot_floats) t += s;
    return t;
  }
};

/// Plans the layers (in execution order; inputs refer to earlier layers only).
MemoryPlan plan_memory(const std::vector<PlanNode>& nodes);

}  // namespace dtrain
