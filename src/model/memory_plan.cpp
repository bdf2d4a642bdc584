// src/model/memory_plan.cpp — the activation-memory planner (see memory_plan.hpp).
#include "memory_plan.hpp"

#include <algorithm>

#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {

/// Lifetimes of the buffers a step needs, in op ticks; then their offsets.
class Lifetimes {
 public:
  /// A buffer of `elems` elements live from now on; returns its id.
  std::size_t acquire(std::size_t elems) {
    bufs_.push_back({elems, now_, kNoSlot, 0});
    return bufs_.size() - 1;
  }
  /// Buffer `id` is last read by the current op.
  void release(std::size_t id) {
    DT_ASSERT(id < bufs_.size() && bufs_[id].end == kNoSlot, "memory plan: buffer released twice");
    bufs_[id].end = now_;
  }
  void tick() { ++now_; }

  /// Assigns offsets (greedy by size) and returns the arena size in elements.
  std::size_t place(std::size_t& peak_live) {
    constexpr std::size_t kAlign = 32;  // elements: tensors ≥ 64-byte aligned in fp32 and bf16
    for (auto& b : bufs_)
      if (b.end == kNoSlot) b.end = now_;
    std::vector<std::size_t> order(bufs_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(),
                     [&](std::size_t a, std::size_t b) { return bufs_[a].elems > bufs_[b].elems; });
    std::vector<std::size_t> placed;
    std::size_t total = 0;
    for (std::size_t id : order) {
      Buf& b = bufs_[id];
      const std::size_t size = (b.elems + kAlign - 1) / kAlign * kAlign;
      std::vector<std::pair<std::size_t, std::size_t>> busy;  // [offset, end) overlapping in time
      for (std::size_t o : placed) {
        const Buf& p = bufs_[o];
        if (p.start <= b.end && b.start <= p.end)
          busy.emplace_back(p.offset, p.offset + (p.elems + kAlign - 1) / kAlign * kAlign);
      }
      std::sort(busy.begin(), busy.end());
      std::size_t offset = 0;
      for (const auto& [lo, hi] : busy) {
        if (lo >= offset + size) break;  // the gap before this one fits
        offset = std::max(offset, hi);
      }
      b.offset = offset;
      total = std::max(total, offset + size);
      placed.push_back(id);
    }
    peak_live = 0;
    for (std::size_t t = 0; t <= now_; ++t) {
      std::size_t live = 0;
      for (const auto& b : bufs_)
        if (b.start <= t && t <= b.end) live += b.elems;
      peak_live = std::max(peak_live, live);
    }
    return total;
  }
  [[nodiscard]] std::size_t offset(std::size_t id) const { return bufs_[id].offset; }
  [[nodiscard]] std::size_t count() const { return bufs_.size(); }

 private:
  struct Buf {
    std::size_t elems, start, end, offset;
  };
  std::vector<Buf> bufs_;
  std::size_t now_ = 0;
};

}  // namespace

namespace {

/// What plan_memory() works on: the graph's readers and the buffers handed out so far.
struct Planner {
  const std::vector<PlanNode>& nodes;
  std::size_t L, T;  // layers; tensors (0 = input, i + 1 = output of layer i)
  std::vector<std::size_t> size, last_consumer, bwd_reader;
  std::vector<int> consumers;
  std::vector<bool> sent;  // per tensor: read by a later pipeline stage
  Lifetimes life;
  std::vector<std::size_t> act_buf, grad_buf;
  std::vector<std::vector<std::size_t>> dx_buf;
  std::vector<std::vector<bool>> accumulate, adds;

  Planner(const std::vector<PlanNode>& n, const std::vector<int>& sent_tensors)
      : nodes(n), L(n.size()), T(n.size() + 1), size(T, 0), last_consumer(T, kNoSlot),
        bwd_reader(T, kNoSlot), consumers(T, 0), sent(T, false), act_buf(T, kNoSlot),
        grad_buf(T, kNoSlot), dx_buf(L), accumulate(L), adds(L) {
    for (std::size_t i = 0; i < L; ++i) size[i + 1] = nodes[i].out_elements;
    for (int t : sent_tensors) {
      DT_ASSERT(t > 0 && static_cast<std::size_t>(t) < T, "memory plan: bad sent tensor");
      sent[static_cast<std::size_t>(t)] = true;
      ++consumers[static_cast<std::size_t>(t)];  // the send reads it: nothing runs in place over it
    }
    readers();
  }

  /// Consumers, last consumers and backward readers of every tensor, over the active layers.
  void readers() {
    for (std::size_t i = 0; i < L; ++i) {
      if (!nodes[i].active) continue;
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
    // An absorbed relu's output shares its input's buffer: whoever reads either in backward keeps
    // the one buffer, tracked as the output's (the input, the producer's output, has no other use).
    for (std::size_t i = 0; i < L; ++i) {
      if (!nodes[i].absorbed || !nodes[i].active) continue;
      DT_ASSERT(i > 0 && nodes[i].inputs.size() == 1 && nodes[i].inputs[0] == static_cast<int>(i) &&
                    consumers[i] == 1 && size[i] == size[i + 1] && nodes[i - 1].active,
                "memory plan: an absorbed relu must be the sole reader of the layer before it");
      bwd_reader[i + 1] = std::min(bwd_reader[i + 1], bwd_reader[i]);
      bwd_reader[i] = kNoSlot;
    }
  }

  void forward() {
    // What earlier stages produce and this one reads or passes on arrives before the first
    // layer runs.
    auto arrives = [&](std::size_t t) {
      if (t != 0 && !nodes[t - 1].active && act_buf[t] == kNoSlot)
        act_buf[t] = life.acquire(size[t]);
    };
    for (std::size_t i = 0; i < L; ++i)
      for (int u : nodes[i].inputs)
        if (nodes[i].active) arrives(static_cast<std::size_t>(u));
    for (std::size_t t = 1; t < T; ++t)
      if (sent[t]) arrives(t);
    for (std::size_t i = 0; i < L; ++i) {
      const PlanNode& n = nodes[i];
      if (!n.active) continue;
      if (n.absorbed) {  // the producer already wrote the relu's output into its own buffer
        act_buf[i + 1] = act_buf[i];
        life.tick();
        continue;
      }
      const auto u = n.inputs.size() == 1 ? static_cast<std::size_t>(n.inputs[0]) : 0;
      const bool in_place = n.needs.in_place && u != 0 && consumers[u] == 1 &&
                            bwd_reader[u] == kNoSlot && size[u] == size[i + 1];
      act_buf[i + 1] = in_place ? act_buf[u] : life.acquire(size[i + 1]);
      if (!in_place) release_inputs(i);  // else the input's buffer now holds this layer's output
      life.tick();
    }
  }

  /// Releases the inputs layer i reads last that no backward reads and no later stage receives.
  void release_inputs(std::size_t i) {
    std::vector<std::size_t> done;
    for (int v : nodes[i].inputs) {
      const auto t = static_cast<std::size_t>(v);
      if (t == 0 || last_consumer[t] != i || bwd_reader[t] != kNoSlot || sent[t]) continue;
      if (std::find(done.begin(), done.end(), t) != done.end()) continue;  // input=a,a
      done.push_back(t);
      life.release(act_buf[t]);
    }
  }

  /// The loss reads the logits and writes their gradient; a stage before the last instead sends
  /// its outputs and receives their gradients.
  void loss(const std::vector<int>& sent_tensors) {
    if (sent_tensors.empty()) {
      grad_buf[L] = life.acquire(size[L]);
      if (bwd_reader[L] == kNoSlot) life.release(act_buf[L]);
    }
    for (int u : sent_tensors) {
      const auto t = static_cast<std::size_t>(u);
      grad_buf[t] = life.acquire(size[t]);
      if (bwd_reader[t] == kNoSlot) life.release(act_buf[t]);
    }
    life.tick();
  }

  void backward() {
    for (std::size_t i = L; i-- > 0;) {
      if (!nodes[i].active) continue;
      if (nodes[i].absorbed) {  // no backward of its own: the producer reads the shared gradient
        grad_buf[i] = grad_buf[i + 1];
        dx_buf[i].push_back(grad_buf[i]);
        accumulate[i].push_back(false);
        adds[i].push_back(false);
        life.tick();
        continue;
      }
      std::vector<std::size_t> scratch;
      for (int v : nodes[i].inputs) {
        const auto t = static_cast<std::size_t>(v);
        const bool first = t != 0 && grad_buf[t] == kNoSlot;
        if (first) grad_buf[t] = life.acquire(size[t]);
        if (t == 0) {
          dx_buf[i].push_back(kNoSlot);
        } else if (first || nodes[i].can_accumulate) {
          dx_buf[i].push_back(grad_buf[t]);
        } else {
          scratch.push_back(life.acquire(size[t]));
          dx_buf[i].push_back(scratch.back());
        }
        accumulate[i].push_back(t != 0 && !first && !nodes[i].can_accumulate);
        adds[i].push_back(t != 0 && !first && nodes[i].can_accumulate);
      }
      for (std::size_t s : scratch) life.release(s);
      life.release(grad_buf[i + 1]);
      for (std::size_t t = 1; t < T; ++t)
        if (bwd_reader[t] == i) life.release(act_buf[t]);
      life.tick();
    }
    // Gradients of received tensors (their producer is not here) stay live: they are sent back.
  }

  MemoryPlan result() {
    MemoryPlan plan;
    plan.total_elements = life.place(plan.peak_live_elements);
    plan.buffers = life.count();
    auto at = [&](std::size_t id) { return id == kNoSlot ? kNoSlot : life.offset(id); };
    plan.act.assign(T, kNoSlot);
    plan.grad.assign(T, kNoSlot);
    for (std::size_t t = 1; t < T; ++t) {
      plan.act[t] = at(act_buf[t]);
      plan.grad[t] = at(grad_buf[t]);
    }
    plan.backward.resize(L);
    for (std::size_t i = 0; i < L; ++i) {
      for (std::size_t id : dx_buf[i]) plan.backward[i].dx.push_back(at(id));
      plan.backward[i].accumulate = accumulate[i];
      plan.backward[i].adds_in_place = adds[i];
    }
    return plan;
  }
};

}  // namespace

MemoryPlan plan_memory(const std::vector<PlanNode>& nodes, const std::vector<int>& sent) {
  Planner p(nodes, sent);
  p.forward();
  p.loss(sent);
  p.backward();
  return p.result();
}

}  // namespace dtrain
