// dtrain/model/step_graphs.hpp — the training step as one CUDA graph (--cuda-graph): the device
// work of a step's forward, loss and backward recorded once per batch shape and replayed, so that
// the host queues one graph launch instead of a launch per kernel (PyTorch's torch.cuda.graphs,
// MLPerf's captured ResNet-50 step). The backend records and replays (dtrain/dnn/backend.hpp
// StepGraph); this class decides when, for the Model:
//
//   first step of a key    eager (warm-up: ops made, cuDNN's first calls, buffers made on first
//                          use — nothing the capture could not record is left for it)
//   second step of a key   captured, instantiated, replayed
//   later steps            replayed
//
// The key (StepGraphKey) is everything the recorded work holds by value or address and the caller
// can change: the batch size (the last partial batch of an epoch is a second key), the gradient
// scale, the batch, label and statistics buffers, the backend's shared buffers (their moves:
// Backend::buffers_generation — graphs of an older generation are dropped). What changes every
// step reaches the graph through memory written before the replay: the batch (uploaded into the
// same buffers) and the dropout seed (Backend::set_step_seed). A capture that fails ends cleanly
// (StepGraph::capture) and the step runs eagerly: with `required` (--cuda-graph on) that is a
// LibraryError naming --cuda-graph; otherwise the failure is logged once and every later step runs
// eagerly — never a wrong result.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "dtrain/dnn/backend.hpp"
#include "dtrain/model/model.hpp"  // InputForm

namespace dtrain {

/// What a recorded step holds besides the model's own fixed buffers (see above). grad_scale is
/// compared by its bits.
struct StepGraphKey {
  int n = 0;                ///< samples in the batch
  float grad_scale = 0.0f;  ///< the loss gradient's scale (SoftmaxXentOp)
  const void* x = nullptr;  ///< the batch, n×C×H×W in `form`
  const void* labels = nullptr;
  const void* stats = nullptr;           ///< kStatsFloats sums the loss adds to
  int slot = 0;                          ///< the model's activation slot
  std::uint64_t generation = 0;          ///< Backend::buffers_generation()
  InputForm form = InputForm::f32_nchw;  ///< Model::input_form(): whether the step converts x
  [[nodiscard]] bool operator==(const StepGraphKey& o) const;
};

class StepGraphs {
 public:
  /// Makes an empty StepGraph (Backend::make_step_graph; nullptr: the backend has none).
  using Factory = std::function<std::unique_ptr<StepGraph>()>;
  /// Receives the log lines (one per captured key, one when the graphs go off).
  using Log = std::function<void(const std::string&)>;
  /// Graphs at most (the training batch, an epoch's last partial batch, ...): the least recently
  /// used one beyond them is freed.
  static constexpr std::size_t kMaxGraphs = 4;

  /// required: --cuda-graph on. `log` may be empty.
  StepGraphs(Factory make, bool required, Log log);

  /// Runs `body` — the device work of one step, reading nothing that `key` does not fix or that
  /// is not written to memory before — once, eagerly or from a graph (see above); `label` names
  /// the step in the log ("128x3x224x224 bf16"). Throws what `body` throws when it runs eagerly;
  /// LibraryError naming --cuda-graph when `required` and the capture fails, or when a replay
  /// fails.
  void run(const StepGraphKey& key, const std::string& label, const std::function<void()>& body);
  /// Runs `body` eagerly because of `why` (the step cannot be captured: e.g. NCCL takes gradient
  /// buckets during backward), logged once per distinct reason; LibraryError naming --cuda-graph
  /// when `required`.
  void run_eagerly(const std::string& why, const std::function<void()>& body);

  /// A capture failed (not `required`): every step runs eagerly.
  [[nodiscard]] bool off() const { return off_; }
  /// Successful captures and replays so far.
  [[nodiscard]] int captures() const { return captures_; }
  [[nodiscard]] std::int64_t replays() const { return replays_; }
  /// Graphs held now.
  [[nodiscard]] std::size_t held() const;

 private:
  struct Entry {
    StepGraphKey key;
    std::unique_ptr<StepGraph> graph;  ///< null after the warm-up step, until captured
  };
  /// The entry of `key`, made (and the least recently used evicted) when new; `fresh` tells.
  Entry& find(const StepGraphKey& key, bool& fresh);
  /// A failed capture: throws when required_, else goes off and logs why.
  void fail(const std::string& label, const std::string& why);
  void say(const std::string& line) const;

  Factory make_;
  bool required_;
  Log log_;
  bool off_ = false;
  int captures_ = 0;
  std::int64_t replays_ = 0;
  std::vector<Entry> entries_;         ///< least recently used first
  std::set<std::string> eager_noted_;  ///< run_eagerly()'s reasons already logged
};

}  // namespace dtrain
