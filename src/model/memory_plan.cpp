// src/model/memory_plan.cpp — the activation-memory planner (see memory_plan.hpp).
#include "memory_plan.hpp"

#include <algorithm>

#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {

class SlotPool {
 public:
  std::size_t acquire(std::size_t floats) {
    std::size_t best = kNoSlot, largest = kNoSlot;
    for (std::size_t s = 0; s < sizes_.size(); ++s) {
      if (busy_[s]) continue;
      if (sizes_[s] >= floats && (best == kNoSlot || sizes_[s] < sizes_[best])) best = s;
      if (largest == kNoSlot || sizes_[s] > sizes_[largest]) largest = s;
    }
    std::size_t s = best != kNoSlot ? best : largest;
    if (s == kNoSlot) {
      s = sizes_.size();
      sizes_.push_back(0);
      busy_.push_back(false);
    }
    sizes_[s] = std::max(sizes_[s], floats);
    busy_[s] = true;
    return s;
  }
  void release(std::size_t s) {
    DT_ASSERT(s < busy_.size() && busy_[s], "memory plan: slot released twice");
    busy_[s] = false;
  }
  [[nodiscard]] const std::vector<std::size_t>& sizes() const { return sizes_; }

 private:
  std::vector<std::size_t> sizes_;
  std::vector<bool> busy_;
};

}  // namespace

MemoryPlan plan_memory(const std::vector<PlanNode>& nodes) {
  const std::size_t L = nodes.size();
  const std::size_t T = L + 1;  // tensors: 0 = input, i + 1 = output of layer i
  constexpr std::size_t kNone = kNoSlot;
  std::vector<std::size_t> size(T, 0), last_consumer(T, kNone), bwd_reader(T, kNone);
  std::vector<int> consumers(T, 0);
  for (std::size_t i = 0; i < L; ++i) {
    size[i + 1] = nodes[i].out_floats;
    // Backward runs in reverse, so a tensor's last backward reader is the lowest layer index.
    if (nodes[i].needs.output) bwd_reader[i + 1] = std::min(bwd_reader[i + 1], i);
    for (int u : nodes[i].inputs) {
      const auto t = static_cast<std::size_t>(u);
      DT_ASSERT(t <= i, "memory plan: layer input is not an earlier tensor");
      ++consumers[t];
      last_consumer[t] = i;
      if (nodes[i].needs.input) bwd_reader[t] = std::min(bwd_reader[t], i);
    }
  }

  MemoryPlan plan;
  plan.act_slot.assign(T, kNone);
  plan.grad_slot.assign(T, kNone);
  plan.backward.resize(L);
  SlotPool pool;

  // Forward.
  for (std::size_t i = 0; i < L; ++i) {
    const PlanNode& n = nodes[i];
    const auto u = n.inputs.size() == 1 ? static_cast<std::size_t>(n.inputs[0]) : 0;
    const bool in_place = n.needs.in_place && u != 0 && consumers[u] == 1 &&
                          bwd_reader[u] == kNone && size[u] == size[i + 1];
    plan.act_slot[i + 1] = in_place ? plan.act_slot[u] : pool.acquire(size[i + 1]);
    if (in_place) continue;  // the input's slot now holds this layer's output
    std::vector<std::size_t> done;
    for (int v : n.inputs) {
      const auto t = static_cast<std::size_t>(v);
      if (t == 0 || last_consumer[t] != i || bwd_reader[t] != kNone) continue;
      if (std::find(done.begin(), done.end(), t) != done.end()) continue;  // input=a,a
      done.push_back(t);
      pool.release(plan.act_slot[t]);
    }
  }
  // Loss: reads the logits, writes their gradient.
  plan.grad_slot[L] = pool.acquire(size[L]);
  if (bwd_reader[L] == kNone) pool.release(plan.act_slot[L]);

  // Backward.
  for (std::size_t i = L; i-- > 0;) {
    const PlanNode& n = nodes[i];
    PlanStep& step = plan.backward[i];
    std::vector<std::size_t> scratch;
    for (int v : n.inputs) {
      const auto t = static_cast<std::size_t>(v);
      if (t == 0) {
        step.dx_slot.push_back(kNone);
        step.accumulate.push_back(false);
      } else if (plan.grad_slot[t] == kNone) {
        plan.grad_slot[t] = pool.acquire(size[t]);
        step.dx_slot.push_back(plan.grad_slot[t]);
        step.accumulate.push_back(false);
      } else {
        scratch.push_back(pool.acquire(size[t]));
        step.dx_slot.push_back(scratch.back());
        step.accumulate.push_back(true);
      }
    }
    for (std::size_t s : scratch) pool.release(s);
    pool.release(plan.grad_slot[i + 1]);
    for (std::size_t t = 1; t < T; ++t)
      if (bwd_reader[t] == i) pool.release(plan.act_slot[t]);
  }
  plan.slot_floats = pool.sizes();
  return plan;
}

}  // namespace dtrain
