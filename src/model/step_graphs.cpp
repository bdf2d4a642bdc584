// dtrain/model/step_graphs.cpp — StepGraphs (see step_graphs.hpp): per key, one eager warm-up
// step, then one capture, then replays; graphs of an older buffer generation dropped.
#include "dtrain/model/step_graphs.hpp"

#include <algorithm>
#include <bit>
#include <utility>

#include "dtrain/core/error.hpp"

namespace dtrain {

bool StepGraphKey::operator==(const StepGraphKey& o) const {
  return n == o.n &&
         std::bit_cast<std::uint32_t>(grad_scale) == std::bit_cast<std::uint32_t>(o.grad_scale) &&
         x == o.x && labels == o.labels && stats == o.stats && slot == o.slot &&
         generation == o.generation && form == o.form;
}

StepGraphs::StepGraphs(Factory make, bool required, Log log)
    : make_(std::move(make)), required_(required), log_(std::move(log)) {}

std::size_t StepGraphs::held() const {
  return static_cast<std::size_t>(std::count_if(entries_.begin(), entries_.end(),
                                                [](const Entry& e) { return e.graph != nullptr; }));
}

void StepGraphs::say(const std::string& line) const {
  if (log_) log_(line);
}

StepGraphs::Entry& StepGraphs::find(const StepGraphKey& key, bool& fresh) {
  // Graphs of another generation hold addresses of freed buffers: never replayed again.
  std::erase_if(entries_, [&](const Entry& e) { return e.key.generation != key.generation; });
  auto it =
      std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.key == key; });
  fresh = it == entries_.end();
  Entry entry = fresh ? Entry{key, nullptr} : std::move(*it);
  if (!fresh) entries_.erase(it);
  if (fresh && entries_.size() >= kMaxGraphs) entries_.erase(entries_.begin());
  entries_.push_back(std::move(entry));  // the most recently used last
  return entries_.back();
}

void StepGraphs::fail(const std::string& label, const std::string& why) {
  const std::string what = "capturing the training step for " + label + " failed: " + why;
  if (required_)
    throw LibraryError("option --cuda-graph on: " + what + " (use --cuda-graph auto or off)");
  off_ = true;
  entries_.clear();
  say("cuda graph: off (" + what + "); the steps run eagerly");
}

void StepGraphs::run(const StepGraphKey& key, const std::string& label,
                     const std::function<void()>& body) {
  if (off_) return body();
  bool fresh = false;
  Entry& e = find(key, fresh);
  if (fresh) return body();  // the warm-up step
  if (!e.graph) {
    std::unique_ptr<StepGraph> graph = make_();
    const std::string why = graph ? graph->capture(body) : "the backend has no CUDA graphs";
    if (!why.empty()) {
      fail(label, why);
      return body();  // the capture ran nothing
    }
    e.graph = std::move(graph);
    ++captures_;
    say("cuda graph: forward+loss+backward captured for " + label +
        " (replayed every step; gradient check, exchange and optimizer run eagerly)");
  }
  try {
    e.graph->replay();
  } catch (const Error& ex) {
    throw LibraryError(std::string("option --cuda-graph: replaying the step for ") + label +
                       " failed: " + ex.what());
  }
  ++replays_;
}

void StepGraphs::run_eagerly(const std::string& why, const std::function<void()>& body) {
  if (required_)
    throw LibraryError("option --cuda-graph on: the training step cannot be captured: " + why +
                       " (use --cuda-graph auto or off)");
  if (eager_noted_.insert(why).second) say("cuda graph: off for this step (" + why + ")");
  body();
}

}  // namespace dtrain
