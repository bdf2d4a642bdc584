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
#include <utility>
#include <vector>

#include "dtrain/dnn/backend.hpp"
#include "dtrain/layers/layer.hpp"

namespace dtrain {

struct MemoryPlan;  // src/model/memory_plan.hpp
class StepGraphs;   // dtrain/model/step_graphs.hpp

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
  std::size_t offset = 0;  ///< in floats, from the start of the flat buffer
  std::size_t count = 0;   ///< floats
  Init init = Init::zeros;
  /// Inputs feeding one output unit, the n of He-normal's N(0, √(2/n)): C·R·S for a conv
  /// weight, I for a dense weight; 1 for every other tensor (unused).
  int fan_in = 1;
  /// Index of the tensor among all the model's parameter (or state) tensors in line order: what
  /// keys its initial values, so that a pipeline stage initialises its tensors as the whole
  /// model does. Equal to the index in param_tensors() / state_tensors() for a whole model.
  std::size_t seed_index = 0;
};

/// The layers a pipeline stage runs: lines [first, last] (0-based, inclusive) of the job's layer
/// order (model/pipeline_plan.hpp cuts them). The default is the whole model.
struct LayerRange {
  std::size_t first = 0;
  std::size_t last = static_cast<std::size_t>(-1);
};

/// One layer as a pipeline planner or a cost model sees it (Model::layers()).
struct LayerInfo {
  std::string type;         ///< "conv", "relu", ...
  std::string name;         ///< name=, or empty
  std::vector<int> inputs;  ///< tensor ids: 0 = the network input, i + 1 = layer i's output
  /// Layer::arguments(): the type's arguments, defaults filled in ("kernel" → "3", ...)
  std::vector<std::pair<std::string, std::string>> arguments;
  Shape output;            ///< per sample (N = 1)
  std::size_t params = 0;  ///< trainable floats
  int stage = -1;          ///< the line's stage= (this layer starts that pipeline stage), or -1
  /// Forward floating-point operations per sample: 2·weights·H·W of the output for conv and
  /// dense (each weight takes part in one multiply-add per output pixel), the output's element
  /// count for every other layer (one operation per element).
  double forward_flops = 0;
};

/// A layer's key: its line's name=, or "<index>.<type>" (index 0-based in line order) — the
/// prefix of its tensors' names (TensorInfo::key) and a profile's layer name (model/profile.hpp).
std::string layer_key(std::size_t index, const std::string& type, const std::string& name);

/// The dropout key of micro-batch m (0-based) of `micro_batches` in a step keyed `step_seed`
/// (Model::train_step_micro and the pipeline stages alike, so that both drop the same units):
/// `step_seed` itself for a step of one micro-batch, which Model::train_step() runs whole.
std::uint64_t micro_batch_seed(std::uint64_t step_seed, int m, int micro_batches);

/// Called by Model::train_step() as backward proceeds: grads()[from, param_count()) are final
/// (`from` decreases from call to call and ends at 0). Gradient buckets start reducing from here.
using GradsFinal = std::function<void(std::size_t from)>;

/// How the batch x handed to a Model's steps is stored (Model::set_input_form).
enum class InputForm {
  /// fp32, n×C×H×W in NCHW order — what the host reader delivers: the model converts it to the
  /// backend's layout and rounds it to bf16 as the backend needs (Model::network_input).
  f32_nchw,
  /// already as the first layer reads it: Model::input_layout(), Backend::act_dtype() — what
  /// Backend::normalize_uint8 writes from a uint8 batch in one pass; the model reads x as is.
  network,
};

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
  /// One pipeline stage: the layers of `part` only (the others are parsed and checked but get
  /// no ops and no memory), its parameters, gradients and state a flat buffer of their own in
  /// line order (TensorInfo::offset from the stage's first tensor), and `slots` activation
  /// arenas of the stage's plan at `max_batch` samples (the micro-batch): one per micro-batch in
  /// flight (GPipe: M, 1F1B: P − stage). The stage receives received_tensors() from the stage
  /// before and sends sent_tensors() to the next; the last stage (part.last the last line) ends
  /// with the loss. Throws as the first constructor, and InputError for an empty or out-of-range
  /// part, slots < 1, or a stage other than the first that reads the network input.
  Model(Backend& backend, const std::vector<std::string>& layer_lines, const Shape& sample,
        int num_classes, int max_batch, const LayerRange& part, int slots);
  ~Model();
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  /// The trainable tensors (name, shape, offset into the flat buffer), in layer order.
  [[nodiscard]] const std::vector<TensorInfo>& param_tensors() const { return params_info_; }
  /// The non-trainable tensors (batch-norm running mean and variance), the same way.
  [[nodiscard]] const std::vector<TensorInfo>& state_tensors() const { return state_info_; }
  [[nodiscard]] std::size_t param_count() const { return param_count_; }  ///< fp32 values
  [[nodiscard]] std::size_t state_count() const { return state_count_; }  ///< fp32 values
  /// Flat device buffers (param_count() / param_count() / state_count() floats); nullptr for a
  /// layout-only model.
  [[nodiscard]] float* params() const { return params_.data(); }
  [[nodiscard]] float* grads() const { return grads_.data(); }
  [[nodiscard]] float* state() const { return state_.data(); }
  /// Moves grads() to `storage`: param_count() + kGradSpare floats of host memory that the
  /// caller owns and keeps valid until it calls place_gradients(nullptr), which moves them back
  /// into a buffer of the model's own (the sync exchange's node-shared gradient:
  /// collectives/hierarchical.hpp, "In place"). The values move with them; every layer is bound
  /// again (CPU ops take their pointers at each call). Throws Error on a GPU backend or a
  /// layout-only model (a programming error).
  void place_gradients(float* storage);
  /// Planned activation + activation-gradient memory for training at max_batch (bytes).
  [[nodiscard]] std::size_t activation_bytes() const { return activation_bytes_; }
  /// Bytes this model holds now in its own device buffers: parameters, gradients, state, the
  /// activation arena, the fp32 logits (bf16), the micro-batch gradient sum once used, and the
  /// input conversion buffers — allocated on the first step that needs them (an InputForm::f32_nchw
  /// batch on an NHWC and/or bf16 backend: max_batch·C·H·W·act_size() bytes per slot, plus
  /// max_batch·C·H·W fp32 where both convert) and kept from then on. The backend's own buffers
  /// (convolution workspace, op descriptors) are not counted. 0 on a layout-only model.
  [[nodiscard]] std::size_t device_bytes() const;
  /// Every layer in line order, with its shape, parameters and forward cost (works on a
  /// layout-only model).
  [[nodiscard]] std::vector<LayerInfo> layers() const;
  /// Layers that run inside another (Backend::fuse(); 0 with fusion off): relus inside the conv,
  /// add or batchnorm before them, adds (with their relu) inside the batchnorm before them.
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

  /// The form of the batch x the steps below take from now on (train_step, train_step_micro,
  /// evaluate, logits, forward_micro); InputForm::f32_nchw until set. Step graphs are keyed by it.
  void set_input_form(InputForm form) { input_form_ = form; }
  [[nodiscard]] InputForm input_form() const { return input_form_; }
  /// The layout the first layer reads the batch in: Backend::layout() where it changes the
  /// sample's memory order (Backend::differs_from_nchw), else nchw — the `to` that
  /// Backend::normalize_uint8 needs for InputForm::network. Throws Error on a layout-only model.
  [[nodiscard]] Layout input_layout() const;
  /// The device address of sample `first` of the batch x in the current input form: x advanced
  /// by first·C·H·W elements of 4 bytes (f32_nchw) or Backend::act_size() bytes (network). For
  /// the callers that slice a batch (micro-batches, pipeline stages, evaluation in pieces).
  [[nodiscard]] const void* input_at(const void* x, int first) const;

  /// One training step on n ≤ max_batch samples: x (device, n×C×H×W in the input form: fp32 in
  /// NCHW order whatever Backend::layout(), converted and/or rounded to bf16 as the backend
  /// needs; or already in the first layer's form), labels (device int32, n, in
  /// [0, num_classes())).
  /// Overwrites grads() with grad_scale·∂(Σ loss)/∂θ; adds Σ loss, #correct and #top-5 hits to
  /// stats[0..2] (kStatsFloats device floats). `step_seed` keys dropout. n == 0 zeroes grads().
  /// `on_final`, if set, is called after each layer's backward (layers in reverse line order;
  /// parameters lie in line order) with the offset from which the gradients are final: at least
  /// once, the last time with 0. The backend may still be computing them (a GPU stream): the
  /// callback must order any use after the backend's work. Throws Error when n > max_batch (or n <
  /// 0) or on a layout-only model, InputError for a label outside [0, num_classes()) on the CPU
  /// backend (the GPU adds NaN to the loss instead), LibraryError when a backend call fails.
  /// With step graphs installed (set_step_graphs), the device work from the input conversion to
  /// the last layer's backward runs through them (model/step_graphs.hpp): from a CUDA graph on
  /// repeated steps with the same StepGraphKey, eagerly where `on_final` is set, a layer probe is
  /// installed or the backend's debug_sync() is on. Same results either way: dropout reads
  /// `step_seed` from the backend's device word (Backend::set_step_seed) on both paths.
  void train_step(const void* x, const std::int32_t* labels, int n, float grad_scale,
                  std::uint64_t step_seed, float* stats, const GradsFinal& on_final = {});
  /// Installs the step graphs train_step() uses (nullptr: none, every step eager; the default).
  /// They must be made for this model's backend.
  void set_step_graphs(std::unique_ptr<StepGraphs> graphs);
  /// The installed step graphs (nullptr: none).
  [[nodiscard]] const StepGraphs* step_graphs() const { return graphs_.get(); }

  /// train_step() over `micro_batches` slices of the n samples, one after another, their
  /// gradients summed: gradient accumulation, GPipe's micro-batches on a single stage (Huang et al.
  /// 2019). Slice m holds samples [n·m/M, n·(m+1)/M) (empty slices are skipped); batch-norm
  /// statistics (and running averages) are per micro-batch, dropout is keyed per micro-batch
  /// (step_seed mixed with m), stats collect every slice. grads() ends as the sum of the slices'
  /// grad_scale-weighted gradients; `on_final` is called during the last slice's backward only,
  /// after the earlier slices' sum was added to each final range. micro_batches ≤ 1 is
  /// train_step(). Needs one extra param_count() floats on the backend (made on first use).
  /// Throws as train_step().
  void train_step_micro(const void* x, const std::int32_t* labels, int n, int micro_batches,
                        float grad_scale, std::uint64_t step_seed, float* stats,
                        const GradsFinal& on_final = {});

  /// Inference forward on n ≤ max_batch samples, x and labels as in train_step(); adds Σ loss,
  /// #correct and #top-5 hits to stats[0..2] (kStatsFloats device floats). n == 0 does nothing.
  /// Throws as train_step().
  void evaluate(const void* x, const std::int32_t* labels, int n, float* stats);

  /// Inference forward on n ≤ max_batch samples x (device, n×C×H×W) — the forward evaluate()
  /// runs; x in the input form as in train_step() — and copies the n×num_classes() fp32 logits to
  /// host_logits (host memory, row-major). n == 0 does nothing. Throws Error when n > max_batch
  /// or on a layout-only model, LibraryError when a backend call fails.
  void logits(const void* x, int n, float* host_logits);

  // ---- pipeline stages (a Model built for a LayerRange; src/model/stage.cpp) ----

  /// The layers this model runs (the whole model unless built for a LayerRange).
  [[nodiscard]] const LayerRange& part() const { return part_; }
  /// True when the model ends with the loss (the whole model, or the last stage).
  [[nodiscard]] bool has_loss() const { return part_.last + 1 == specs_.size(); }
  /// Tensor ids (0 = network input, i + 1 = layer i's output) produced before part().first and
  /// read at or after it — what the stage before sends, in increasing id order; empty for the
  /// first stage.
  [[nodiscard]] const std::vector<int>& received_tensors() const { return received_; }
  /// Tensor ids produced at or before part().last and read after it (passed through included),
  /// in increasing id order; empty for the last stage.
  [[nodiscard]] const std::vector<int>& sent_tensors() const { return sent_; }
  /// Elements of tensor `t` (received or sent) at n samples; its bytes are this times
  /// Backend::act_size().
  [[nodiscard]] std::size_t tensor_elements(int t, int n) const;
  /// Device pointers of tensor `t` (received or sent) and of its gradient in activation slot
  /// `slot` (in Backend::act_dtype(), in the backend's layout): forward_micro() reads the
  /// received values and writes the sent ones there, backward_micro() reads the sent gradients
  /// and writes the received ones. Throws Error for a tensor that does not cross a cut of this
  /// stage or a slot out of range.
  [[nodiscard]] void* tensor_value(int slot, int t) const;
  [[nodiscard]] void* tensor_grad(int slot, int t) const;
  [[nodiscard]] int slots() const { return slots_; }
  /// Forward of this stage's layers on one micro-batch of n ≤ max_batch samples in slot `slot`:
  /// x (first stage: device n×C×H×W in the input form, as train_step(); must stay valid until
  /// backward_micro of the slot) and the received tensors in the slot as input; on the last stage
  /// then the loss (labels: device int32, n), adding Σ loss, #correct and #top-5 hits to
  /// stats[0..2] and, when training, writing grad_scale·∂loss/∂logits. `training` false: inference
  /// mode (batch-norm running statistics, no dropout), nothing kept for backward. `seed` keys
  /// dropout as train_step()'s step_seed does. Throws as train_step().
  void forward_micro(int slot, const void* x, const std::int32_t* labels, int n, float grad_scale,
                     std::uint64_t seed, float* stats, bool training);
  /// Backward of this stage's layers for the micro-batch forward_micro() left in `slot`, from
  /// the loss's gradient (last stage) or the sent tensors' gradients (tensor_grad); writes the
  /// received tensors' gradients and overwrites grads() with this micro-batch's parameter
  /// gradients; on_final as in train_step(). Throws as train_step().
  void backward_micro(int slot, int n, const GradsFinal& on_final = {});
  /// Gradient accumulation over micro-batches, in micro-batch order: after the backward of
  /// micro-batch m of M, keeps the running sum (m = 0: a copy; then added) and, for m = M − 1,
  /// adds it into grads(), which then holds g_{M−1} + (g_0 + … + g_{M−2}) — bit for bit what
  /// train_step_micro() leaves. M ≤ 1 does nothing.
  void accumulate_micro(int m, int M);

  /// Called after each layer's forward (backward = false) and backward (true) in the training
  /// steps, with the layer's 0-based line index; a layer fused into another reports when its host
  /// did. For per-layer timing (plan/profiler.hpp): on a GPU the probe must synchronize itself.
  using LayerProbe = std::function<void(std::size_t layer, bool backward)>;
  /// Installs `probe` (empty: none, the default).
  void set_layer_probe(LayerProbe probe) { probe_ = std::move(probe); }

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
        int num_classes, int max_batch, DType act, const LayerRange& part, int slots);
  [[nodiscard]] bool inside(std::size_t layer) const {
    return layer >= part_.first && layer <= part_.last;
  }
  /// received_ and sent_ from the graph and part_ (InputError for a later stage reading data).
  void find_crossings();
  /// Lays out the parameters and state of the layers inside part_ (params_info_, state_info_).
  void place_tensors(const Stack& stack);
  void plan(const Stack& stack);
  /// The loss's forward and backward on the logits (last stage), stats as train_step().
  void run_loss(Stack& s, const void* input, const std::int32_t* labels, int n, float grad_scale,
                float* stats, bool training);
  void run_backward(Stack& s, const void* input, const GradsFinal& on_final);
  void build_graph(const std::vector<std::string>& layer_lines);
  Stack& stack_for(int n);
  std::unique_ptr<Stack> make_stack(int n, Backend* be);
  /// Fusion (Backend::fuse()): on the first stack, decides which layers run inside another
  /// (absorbed_, host_) — a relu inside the conv, add or batchnorm before it, a batchnorm's
  /// following add + relu inside the batchnorm — and asks the host layers (Layer::absorb_relu,
  /// absorb_add_relu); on later stacks, asks the same layers.
  void fuse(Stack& s);
  /// Tries to fold the add at `a` and the relu after it into the batchnorm at a − 1.
  bool fuse_add_relu(Stack& s, std::size_t a, const std::vector<int>& consumers);
  void bind(Stack& s);
  void run_forward(Stack& s, const void* input, const StepContext& ctx);
  /// Activation `tensor` (0: the network input `input`, i + 1: layer i's output) in the arena
  /// of the current slot (slot_).
  [[nodiscard]] void* act(int tensor, const void* input) const;
  /// The gradient of tensor `t` (plan offset `offset`) in the current slot.
  [[nodiscard]] void* at(std::size_t offset) const;
  /// Whether network_input() converts the batch (InputForm::f32_nchw on the first stage of an
  /// NHWC and/or bf16 backend); allocates input_ (and input_f32_) on the first such call and keeps
  /// them, since a captured step graph holds their addresses. train_step calls it before its body,
  /// so that no allocation ever happens inside a CUDA graph capture (StepGraphs also runs each
  /// key's first step eagerly, and the key holds the input form).
  bool prepare_input();
  /// The batch x (n samples in input_form_) in the backend's layout and act_dtype(): x itself
  /// (InputForm::network, or fp32 NCHW that needs no change), or converted
  /// (Backend::differs_from_nchw(sample)) and/or rounded to bf16 into input_ (prepare_input()).
  const void* network_input(const void* x, int n);

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
  bool grads_placed_ = false;  ///< grads_ borrows the caller's memory (place_gradients)
  std::unique_ptr<MemoryPlan> plan_;
  LayerRange part_;
  int slots_ = 1;
  LayerProbe probe_;  ///< set_layer_probe()
  int slot_ = 0;      ///< the activation slot the steps use (pipeline micro-batches in flight)
  InputForm input_form_ = InputForm::f32_nchw;  ///< set_input_form()
  std::vector<int> received_, sent_;
  std::vector<const void*> slot_input_;  ///< per slot: the network input its forward read
  /// activation memory (see MemoryPlan), shared by every stack: slots_ arenas of
  /// activation_bytes_ each
  DeviceBuffer<std::byte> arena_;
  /// the batch as the first layer reads it (network_input), one per slot; empty until
  /// prepare_input() needs it
  DeviceBuffer<std::byte> input_;
  DeviceBuffer<float> input_f32_;   ///< the batch converted to NHWC before rounding (bf16 + NHWC)
  DeviceBuffer<float> logits_f32_;  ///< logits() cast to fp32 (bf16 only)
  DeviceBuffer<float> grad_sum_;    ///< train_step_micro: the earlier micro-batches' gradients
  /// Layers per (batch size, activation slot).
  std::map<std::pair<int, int>, std::unique_ptr<Stack>> stacks_;
  std::unique_ptr<StepGraphs> graphs_;  ///< set_step_graphs(); before stacks_ in destruction
};

}  // namespace dtrain
