// dtrain/model/model.hpp — a network built from a job file's layer lines: a directed acyclic graph
// of layers (each line may name itself and take inputs from earlier lines; see layers/layer.hpp),
// with every parameter, gradient and state tensor a view into one flat device buffer (so sharding
// over ps ranks, allreduce and checkpoints work on plain float ranges; see docs/design.md).
//
// Followed by softmax cross-entropy on the last layer's output. Layers run in line order (a
// topological order, since inputs must come from earlier lines). Backward visits them in reverse
// and sums the gradients of an output that feeds several layers.
//
// Activation memory is planned once, for the largest batch: every activation and activation
// gradient lives in one arena, at an offset it holds only from the op that writes it to the last
// op that reads it (forward, or backward where the consumer's backward needs it, Layer::needs()),
// and relu/sigmoid/dropout/flatten run in place over an input nobody else reads — as torch.nn's
// inplace=True does. summary() prints the planned activation bytes.
//
// One set of layers (ops built for its shapes) is made per batch size met (the training batch, a
// last partial batch, the evaluation batch); all share the flat buffers and the activation slots.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/dnn/backend.hpp"
#include "dtrain/layers/layer.hpp"

namespace dtrain {

struct MemoryPlan;  // src/model/memory_plan.hpp

/// Where one tensor lives in a flat buffer.
struct TensorInfo {
  /// Internal name "<index>.<type>.<param>", e.g. "0.conv.weight" (0-based line index; dtrain's
  /// parameter names gamma/beta): what signature() lists, so renaming a layer never changes it
  std::string name;
  /// Stable public name, a PyTorch state_dict key: "<layer>.<param>" with <layer> the line's
  /// name= (e.g. "layer1.0.conv1") or, without one, "<index>.<type>" ("3.conv"), and <param>
  /// PyTorch's: weight, bias (batchnorm γ, β too), running_mean, running_var. Unique in a model.
  /// Checkpoints, `dtrain export` and --init-from use it.
  std::string key;
  /// PyTorch's shape of the tensor (the same row-major data): conv weight [O, I, kH, kW] (OIHW),
  /// dense weight [out, in], every bias and batchnorm tensor [C].
  std::vector<std::int64_t> dims;
  Shape shape;
  std::size_t offset = 0;   ///< in floats, from the start of the flat buffer
  std::size_t count = 0;    ///< floats
  Init init = Init::zeros;
  /// Inputs feeding one output unit, the n of He-normal's N(0, √(2/n)): C·R·S for a conv
  /// weight, I for a dense weight; 1 for every other tensor (unused).
  int fan_in = 1;
};

/// One layer as a pipeline planner or a cost model sees it (Model::layers()).
struct LayerInfo {
  std::string type;         ///< "conv", "relu", ...
  std::string name;         ///< name=, or empty
  std::vector<int> inputs;  ///< tensor ids: 0 = the network input, i + 1 = layer i's output
  Shape output;             ///< per sample (N = 1)
  std::size_t params = 0;   ///< trainable floats
  int stage = -1;           ///< the line's stage= (this layer starts that pipeline stage), or -1
  /// Forward floating-point operations per sample: 2·weights·H·W of the output for conv and
  /// dense (each weight takes part in one multiply-add per output pixel), the output's element
  /// count for every other layer (one operation per element).
  double forward_flops = 0;
};

/// Called by Model::train_step() as backward proceeds: grads()[from, param_count()) are final
/// (`from` decreases from call to call and ends at 0). Gradient buckets start reducing from here.
using GradsFinal = std::function<void(std::size_t from)>;

class Model {
 public:
  /// grads() holds param_count() + kGradSpare floats: the spare float after the gradients is free
  /// for the exchange (the sync allreduce carries its stop flag there, in the last bucket).
  static constexpr std::size_t kGradSpare = 1;

  /// Builds the network. `sample` is 1×C×H×W from the dataset, `max_batch` the largest batch
  /// that will be passed. Throws InputError naming the layer line on any bad layer or graph
  /// (unknown or later input, duplicate name, shapes that do not fit, an unused output), and
  /// InputError for no layers, num_classes < 2, max_batch < 1 or a last layer whose output is not
  /// N×num_classes×1×1; LibraryError when the backend fails to allocate or build an op.
  Model(Backend& backend, const std::vector<std::string>& layer_lines, const Shape& sample,
        int num_classes, int max_batch);
  /// Layout only: the same checks, parameter/state tables, signature and summary, but no backend,
  /// no ops and no memory (for ranks that only need the layout, e.g. parameter servers).
  /// `max_batch` sizes the activation plan that summary() reports, `act` its element type (the
  /// workers' Backend::act_dtype()). Throws InputError as the first constructor.
  Model(const std::vector<std::string>& layer_lines, const Shape& sample, int num_classes,
        int max_batch = 1, DType act = DType::f32);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  [[nodiscard]] const std::vector<TensorInfo>& param_tensors() const { return params_info_; }
  [[nodiscard]] const std::vector<TensorInfo>& state_tensors() const { return state_info_; }
  [[nodiscard]] std::size_t param_count() const { return param_count_; }
  [[nodiscard]] std::size_t state_count() const { return state_count_; }
  /// Flat device buffers (param_count() / param_count() / state_count() floats); nullptr for a
  /// layout-only model.
  [[nodiscard]] float* params() const { return params_.data(); }
  [[nodiscard]] float* grads() const { return grads_.data(); }
  [[nodiscard]] float* state() const { return state_.data(); }
  /// Planned activation + activation-gradient memory for training at max_batch (bytes).
  [[nodiscard]] std::size_t activation_bytes() const { return activation_bytes_; }
  /// Every layer in line order, with its shape, parameters and forward cost (works on a
  /// layout-only model).
  [[nodiscard]] std::vector<LayerInfo> layers() const;
  /// Layers that run inside another (Backend::fuse(); 0 with fusion off): relus inside the add
  /// or batchnorm before them, adds (with their relu) inside the batchnorm before them.
  [[nodiscard]] std::size_t fused_layers() const;
  /// Layers whose backward adds into an input gradient in place (ConvOp::set_accumulate_dx)
  /// instead of writing a scratch gradient that an add then sums.
  [[nodiscard]] std::size_t in_place_gradient_sums() const;

  /// Writes initial parameters (He-normal weights, zero biases, γ = 1, β = 0) and state
  /// (running mean 0, running var 1), deterministically from `seed`. Throws Error on a
  /// layout-only model, LibraryError when the copy to the device fails.
  void initialize(std::uint64_t seed);
  /// The values initialize(seed) writes, on the host (works on a layout-only model):
  /// param_count() parameters and max(state_count(), 1) state floats.
  void initial_values(std::uint64_t seed, std::vector<float>& params,
                      std::vector<float>& state) const;

  /// One training step on n ≤ max_batch samples: x (device, fp32 n×C×H×W in NCHW order whatever
  /// Backend::layout(): converted and/or rounded to bf16 as the backend needs), labels (device
  /// int32, n, in [0, num_classes())).
  /// Overwrites grads() with grad_scale·∂(Σ loss)/∂θ; adds Σ loss and #correct to stats[0..1]
  /// (device floats). `step_seed` keys dropout. n == 0 zeroes grads(). `on_final`, if set, is
  /// called after each layer's backward (layers in reverse line order; parameters lie in line
  /// order) with the offset from which the gradients are final: at least once, the last time
  /// with 0. The backend may still be computing them (a GPU stream): the callback must order
  /// any use after the backend's work. Throws Error when n > max_batch (or n < 0) or on a
  /// layout-only model, InputError for a label outside [0, num_classes()) on the CPU backend (the
  /// GPU adds NaN to the loss instead), LibraryError when a backend call fails.
  void train_step(const float* x, const std::int32_t* labels, int n, float grad_scale,
                  std::uint64_t step_seed, float* stats, const GradsFinal& on_final = {});

  /// train_step() over `micro_batches` slices of the n samples, one after another, their
  /// gradients summed: gradient accumulation, GPipe's micro-batches on a single stage (Huang et al.
  /// 2019). Slice m holds samples [n·m/M, n·(m+1)/M) (empty slices are skipped); batch-norm
  /// statistics (and running averages) are per micro-batch, dropout is keyed per micro-batch
  /// (step_seed mixed with m), stats collect every slice. grads() ends as the sum of the slices'
  /// grad_scale-weighted gradients; `on_final` is called during the last slice's backward only,
  /// after the earlier slices' sum was added to each final range. micro_batches ≤ 1 is
  /// train_step(). Needs one extra param_count() floats on the backend (made on first use).
  /// Throws as train_step().
  void train_step_micro(const float* x, const std::int32_t* labels, int n, int micro_batches,
                        float grad_scale, std::uint64_t step_seed, float* stats,
                        const GradsFinal& on_final = {});

  /// Inference forward on n ≤ max_batch samples, x and labels as in train_step(); adds Σ loss and
  /// #correct to stats[0..1] (device floats). n == 0 does nothing. Throws as train_step().
  void evaluate(const float* x, const std::int32_t* labels, int n, float* stats);

  /// Inference forward on n ≤ max_batch samples x (device, n×C×H×W) — the forward evaluate()
  /// runs; x fp32 NCHW as in train_step() — and copies the n×num_classes() fp32 logits to
  /// host_logits (host memory, row-major). n == 0 does nothing. Throws Error when n > max_batch
  /// or on a layout-only model, LibraryError when a backend call fails.
  void logits(const float* x, int n, float* host_logits);

  /// Identifies the architecture: one line per layer with its description, its inputs when they
  /// are not the previous layer, and its tensor shapes. Two models accept each other's
  /// checkpoints iff their signatures are equal.
  [[nodiscard]] std::string signature() const;
  /// Human-readable table: layer, inputs, output shape, parameters; peak activation bytes.
  [[nodiscard]] std::string summary() const;
  [[nodiscard]] const Shape& sample_shape() const { return sample_; }
  [[nodiscard]] int num_classes() const { return num_classes_; }
  [[nodiscard]] int max_batch() const { return max_batch_; }
  /// The backend; throws Error for a layout-only model.
  [[nodiscard]] Backend& backend() const;

 private:
  struct Stack;
  Model(Backend* backend, const std::vector<std::string>& layer_lines, const Shape& sample,
        int num_classes, int max_batch, DType act);
  void build_graph(const std::vector<std::string>& layer_lines);
  Stack& stack_for(int n);
  std::unique_ptr<Stack> make_stack(int n, Backend* be);
  /// Fusion (Backend::fuse()): on the first stack, decides which layers run inside another
  /// (absorbed_, host_) — a relu inside the add or batchnorm before it, a batchnorm's following
  /// add + relu inside the batchnorm — and asks the host layers (Layer::absorb_relu,
  /// absorb_add_relu); on later stacks, asks the same layers.
  void fuse(Stack& s);
  /// Tries to fold the add at `a` and the relu after it into the batchnorm at a − 1.
  bool fuse_add_relu(Stack& s, std::size_t a, const std::vector<int>& consumers);
  void bind(Stack& s);
  void run_forward(Stack& s, const void* input, const StepContext& ctx);
  /// Activation `tensor` (0: the network input `input`, i + 1: layer i's output) in the arena.
  [[nodiscard]] void* act(int tensor, const void* input) const;
  /// The batch x (n samples, fp32 NCHW as the data reader delivers it) in the backend's layout
  /// and act_dtype(): x itself, or converted (Backend::differs_from_nchw(sample)) and/or rounded
  /// to bf16 into input_.
  const void* network_input(const float* x, int n);

  Backend* backend_;
  std::vector<LayerSpec> specs_;
  std::vector<std::vector<int>> inputs_;  ///< per layer: tensor ids (0 = data, i+1 = layer i)
  Shape sample_;
  int num_classes_;
  int max_batch_;
  std::vector<TensorInfo> params_info_, state_info_;
  std::size_t param_count_ = 0, state_count_ = 0, activation_bytes_ = 0;
  std::size_t act_size_ = sizeof(float);  ///< bytes per activation element (Backend::act_size())
  std::vector<std::size_t> grads_final_from_;  ///< per layer: its first parameter's offset
  /// Per layer: run inside another layer (host_), skipped itself; empty until the first stack.
  std::vector<bool> absorbed_;
  /// Per layer: what it absorbed — 0 nothing, 1 the relu after it, 2 the add + relu after it.
  std::vector<int> fused_;
  /// Per layer: the layer an absorbed one runs inside (for the summary).
  std::vector<std::size_t> host_;
  /// Per layer: the tensors it reads when run — inputs_, except that a batchnorm that absorbed an
  /// add also reads the add's other input, and the absorbed add then reads only the batchnorm.
  std::vector<std::vector<int>> run_inputs_;
  DeviceBuffer<float> params_, grads_, state_;
  std::unique_ptr<MemoryPlan> plan_;
  DeviceBuffer<std::byte> arena_;  ///< activation memory (see MemoryPlan), shared by every stack
  DeviceBuffer<std::byte> input_;  ///< the batch as the first layer reads it (network_input)
  DeviceBuffer<float> input_f32_;  ///< the batch converted to NHWC before rounding (bf16 + NHWC)
  DeviceBuffer<float> logits_f32_;  ///< logits() cast to fp32 (bf16 only)
  DeviceBuffer<float> grad_sum_;    ///< train_step_micro: the earlier micro-batches' gradients
  std::map<int, std::unique_ptr<Stack>> stacks_;
};

}  // namespace dtrain
