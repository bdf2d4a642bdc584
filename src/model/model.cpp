// dtrain/model/model.cpp — the layer graph over flat parameter/gradient/state buffers, its fusions
// and the activation-memory plan (see model.hpp); running it (forward, loss, backward, evaluation):
// model_step.cpp.
#include "dtrain/model/model.hpp"

#include <algorithm>
#include <cstring>
#include <cmath>
#include <random>
#include <sstream>

#include "dtrain/core/error.hpp"
#include "dtrain/dnn/counter_rng.hpp"
#include "dtrain/model/step_graphs.hpp"  // ~Model: the owned StepGraphs
#include "memory_plan.hpp"
#include "model_stack.hpp"

namespace dtrain {

namespace {
/// PyTorch's shape of a layer's tensor (TensorInfo::dims): 4-d conv weights, 2-d dense weights,
/// 1-d everything else (bias, batchnorm).
std::vector<std::int64_t> torch_dims(const std::string& type, const ParamDef& d) {
  if (type == "conv" && d.name == "weight") return {d.shape.n, d.shape.c, d.shape.h, d.shape.w};
  if (type == "dense" && d.name == "weight") return {d.shape.n, d.shape.c};
  return {static_cast<std::int64_t>(d.shape.count())};
}

/// PyTorch's name of a layer's tensor: batchnorm's γ and β are its weight and bias.
std::string torch_param(const std::string& name) {
  if (name == "gamma") return "weight";
  if (name == "beta") return "bias";
  return name;
}

/// `prefix`: the layer's public name (TensorInfo::key before ".<param>").
std::vector<TensorInfo> place(const std::vector<ParamDef>& defs, std::size_t layer,
                              const std::string& type, const std::string& prefix,
                              std::size_t& offset) {
  std::vector<TensorInfo> out;
  for (const auto& d : defs) {
    TensorInfo t;
    t.name = std::to_string(layer) + "." + type + "." + d.name;
    t.key = prefix + "." + torch_param(d.name);
    t.dims = torch_dims(type, d);
    t.shape = d.shape;
    t.offset = offset;
    t.count = d.shape.count();
    t.init = d.init;
    t.fan_in = d.fan_in;
    offset += t.count;
    out.push_back(t);
  }
  return out;
}

std::string where(std::size_t i, const LayerSpec& spec) {
  return "layer #" + std::to_string(i + 1) + " '" + spec.text + "'";
}
}  // namespace

std::string layer_key(std::size_t index, const std::string& type, const std::string& name) {
  return name.empty() ? std::to_string(index) + "." + type : name;
}

Model::Model(Backend& backend, const std::vector<std::string>& layer_lines, const Shape& sample,
             int num_classes, int max_batch)
    : Model(&backend, layer_lines, sample, num_classes, max_batch, backend.act_dtype(),
            LayerRange{}, 1) {}

Model::Model(const std::vector<std::string>& layer_lines, const Shape& sample, int num_classes,
             int max_batch, DType act)
    : Model(nullptr, layer_lines, sample, num_classes, max_batch, act, LayerRange{}, 1) {}

Model::Model(Backend& backend, const std::vector<std::string>& layer_lines, const Shape& sample,
             int num_classes, int max_batch, const LayerRange& part, int slots)
    : Model(&backend, layer_lines, sample, num_classes, max_batch, backend.act_dtype(), part,
            slots) {}

Model::Model(Backend* backend, const std::vector<std::string>& layer_lines, const Shape& sample,
             int num_classes, int max_batch, DType act, const LayerRange& part, int slots)
    : backend_(backend), sample_(sample.with_n(1)), num_classes_(num_classes),
      max_batch_(max_batch), act_size_(dtype_size(act)), part_(part), slots_(slots) {
  DT_REQUIRE(!layer_lines.empty(), "model: no layers given (add `layer = ...` lines)");
  DT_REQUIRE(num_classes >= 2,
             "model: need at least 2 classes, got " + std::to_string(num_classes));
  DT_REQUIRE(max_batch >= 1, "model: batch size must be >= 1");
  DT_REQUIRE(slots >= 1, "model: a stage needs at least one activation slot");
  part_.last = std::min(part_.last, layer_lines.size() - 1);
  DT_REQUIRE(part_.first <= part_.last, "model: stage layers " + std::to_string(part_.first + 1) +
                                            ".." + std::to_string(part_.last + 1) +
                                            " are empty or past the model's " +
                                            std::to_string(layer_lines.size()) + " layers");
  build_graph(layer_lines);
  find_crossings();

  // Build the max-batch stack first: it fixes the tensor layout and validates every shape.
  auto stack = make_stack(max_batch, backend);
  place_tensors(*stack);
  const Shape out = stack->layers.back()->output_shape();
  DT_REQUIRE(out.c == num_classes && out.h == 1 && out.w == 1,
             "model: the last layer '" + specs_.back().text + "' outputs " + out.str() +
                 " but the loss needs N x " + std::to_string(num_classes) +
                 " x 1 x 1 (one logit per class; end with `layer = dense`)");
  plan(*stack);

  if (backend == nullptr) {
    stacks_[{max_batch, 0}] = std::move(stack);
    return;
  }
  params_ = DeviceBuffer<float>(*backend, param_count_);
  grads_ = DeviceBuffer<float>(*backend, param_count_ + kGradSpare);
  state_ = DeviceBuffer<float>(*backend, std::max<std::size_t>(state_count_, 1));
  arena_ = DeviceBuffer<std::byte>(
      *backend, std::max<std::size_t>(activation_bytes_ * static_cast<std::size_t>(slots_), 1));
  // See logits(); the input conversion buffers wait for their first use (prepare_input()).
  const bool cast = backend->act_dtype() != DType::f32;
  if (cast && has_loss())
    logits_f32_ = DeviceBuffer<float>(*backend, static_cast<std::size_t>(max_batch) * num_classes);
  bind(*stack);
  stacks_[{max_batch, 0}] = std::move(stack);
}

void Model::place_tensors(const Stack& stack) {
  std::size_t poff = 0, soff = 0, pseed = 0, sseed = 0;
  std::vector<std::size_t> first_param;  // per layer: its first parameter's offset
  for (std::size_t i = 0; i < stack.layers.size(); ++i) {
    const Layer& l = *stack.layers[i];
    first_param.push_back(poff);
    if (!inside(i)) {  // another stage's: counted for the initial values' keys only
      pseed += l.param_defs().size();
      sseed += l.state_defs().size();
      continue;
    }
    const std::string prefix = layer_key(i, l.type(), specs_[i].name);
    for (auto& t : place(l.param_defs(), i, l.type(), prefix, poff)) {
      t.seed_index = pseed++;
      params_info_.push_back(t);
    }
    for (auto& t : place(l.state_defs(), i, l.type(), prefix, soff)) {
      t.seed_index = sseed++;
      state_info_.push_back(t);
    }
  }
  {  // Public names must be unique: a name= may equal a generated "<index>.<type>".
    std::map<std::string, std::string> seen;  // key -> internal name
    for (const auto* list : {&params_info_, &state_info_})
      for (const TensorInfo& t : *list) {
        const auto [it, fresh] = seen.emplace(t.key, t.name);
        const auto layer = [](const std::string& n) { return std::stoul(n) + 1; };
        if (!fresh)
          throw InputError("model: tensor name '" + t.key + "' is given to layer #" +
                           std::to_string(layer(it->second)) + " and layer #" +
                           std::to_string(layer(t.name)) +
                           " (a name= equals a generated "
                           "'<index>.<type>' name); rename one of them");
      }
  }
  // Offsets grow with the line, so after layer i's backward grads[first_param[i], P) are final.
  grads_final_from_ = std::move(first_param);
  param_count_ = poff;
  state_count_ = soff;
}

void Model::plan(const Stack& stack) {
  std::vector<PlanNode> nodes;
  for (std::size_t i = 0; i < stack.layers.size(); ++i) {
    const Layer& l = *stack.layers[i];
    PlanNode node{run_inputs_[i], l.output_shape().count(), l.needs()};
    node.absorbed = absorbed_[i];
    if (node.absorbed) node.needs = {false, false, false};  // it never runs
    node.can_accumulate = backend_ != nullptr && backend_->fuse() && l.can_accumulate_dx();
    node.active = inside(i);
    nodes.push_back(node);
  }
  plan_ = std::make_unique<MemoryPlan>(plan_memory(nodes, sent_));
  activation_bytes_ = plan_->total_elements * act_size_;
}

Model::~Model() = default;

void Model::build_graph(const std::vector<std::string>& layer_lines) {
  for (const auto& line : layer_lines) specs_.push_back(parse_layer_spec(line));
  std::map<std::string, std::size_t> later;  // name -> layer index, for the error message
  for (std::size_t i = 0; i < specs_.size(); ++i)
    if (!specs_[i].name.empty()) later.emplace(specs_[i].name, i);
  std::map<std::string, int> known{{kInputName, 0}};
  std::vector<int> consumers(specs_.size() + 1, 0);
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const LayerSpec& spec = specs_[i];
    std::vector<int> in;
    if (spec.inputs.empty()) in.push_back(static_cast<int>(i));  // the previous layer (or data)
    for (const auto& name : spec.inputs) {
      const auto it = known.find(name);
      if (it != known.end()) {
        in.push_back(it->second);
        continue;
      }
      const auto fwd = later.find(name);
      if (fwd != later.end())
        throw InputError(where(i, spec) + ": input '" + name + "' is layer #" +
                         std::to_string(fwd->second + 1) +
                         ", which comes later: a layer may only "
                         "take inputs from earlier lines (so the graph has no cycles)");
      std::string names;
      for (const auto& [n, t] : known) names += (names.empty() ? "" : ", ") + n;
      throw InputError(where(i, spec) + ": input '" + name +
                       "' names no earlier layer (known: " + names + ")");
    }
    for (int t : in) ++consumers[static_cast<std::size_t>(t)];
    inputs_.push_back(in);
    if (!spec.name.empty() && !known.emplace(spec.name, static_cast<int>(i) + 1).second)
      throw InputError(where(i, spec) + ": name '" + spec.name +
                       "' is already used by an earlier layer");
  }
  for (std::size_t i = 0; i + 1 < specs_.size(); ++i)
    if (consumers[i + 1] == 0)
      throw InputError(where(i, specs_[i]) +
                       ": its output is used by no later layer (only the "
                       "last layer's output, the logits, may be unused); remove it or name it "
                       "in a later layer's input=");
}

std::unique_ptr<Model::Stack> Model::make_stack(int n, Backend* be) {
  auto stack = std::make_unique<Stack>();
  std::vector<Shape> out;  // tensor shapes: out[0] = data, out[i+1] = layer i
  out.push_back(sample_.with_n(n));
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    std::vector<Shape> in;
    for (int t : inputs_[i]) in.push_back(out[static_cast<std::size_t>(t)]);
    // Another stage's layers: layout only (shapes and tensor sizes), no ops, no memory.
    stack->layers.push_back(make_layer(specs_[i], in, num_classes_, inside(i) ? be : nullptr));
    out.push_back(stack->layers.back()->output_shape());
  }
  if (be != nullptr && has_loss()) stack->loss = be->make_softmax_xent(n, num_classes_);
  fuse(*stack);
  return stack;
}

void Model::fuse(Stack& s) {
  const std::size_t L = s.layers.size();
  if (!fused_.empty()) {  // a later batch size: the same layers fuse
    for (std::size_t i = 0; i < L; ++i) {
      const bool ok = fused_[i] == 0 || (fused_[i] == 1 ? s.layers[i]->absorb_relu()
                                                        : s.layers[i]->absorb_add_relu());
      DT_ASSERT(ok, "model: layer #" + std::to_string(i + 1) + " fused at one batch size only");
    }
    return;
  }
  absorbed_.assign(L, false);
  fused_.assign(L, 0);
  host_.assign(L, 0);
  run_inputs_ = inputs_;
  if (backend_ == nullptr || !backend_->fuse()) return;
  std::vector<int> consumers(L + 1, 0);
  for (const auto& in : inputs_)
    for (int t : in) ++consumers[static_cast<std::size_t>(t)];
  // Layer i reads tensor i (the output of layer i − 1) alone, and nothing else reads it.
  auto sole_reader = [&](std::size_t i) {
    return inputs_[i].size() == 1 && inputs_[i][0] == static_cast<int>(i) && consumers[i] == 1;
  };
  // A stage fuses only its own layers (a pipeline cut between two ends the fusion).
  for (std::size_t a = 1; a + 1 < L; ++a)
    if (specs_[a].type == "add" && specs_[a + 1].type == "relu" && sole_reader(a + 1) &&
        inside(a - 1) && inside(a + 1))
      fuse_add_relu(s, a, consumers);
  for (std::size_t i = 1; i < L; ++i) {
    if (specs_[i].type != "relu" || !inside(i - 1) || !inside(i) || absorbed_[i] ||
        absorbed_[i - 1] || fused_[i - 1] != 0 || !sole_reader(i) ||
        !s.layers[i - 1]->absorb_relu())
      continue;
    absorbed_[i] = true;
    host_[i] = i - 1;
    fused_[i - 1] = 1;
  }
}

bool Model::fuse_add_relu(Stack& s, std::size_t a, const std::vector<int>& consumers) {
  // The add reads the batchnorm right before it (tensor a, read by nothing else) and z.
  const std::size_t p = a - 1;
  const auto bn = static_cast<int>(a);
  const std::vector<int>& in = inputs_[a];
  if (specs_[p].type != "batchnorm" || in.size() != 2 || consumers[a] != 1 || absorbed_[p] ||
      (in[0] != bn && in[1] != bn) || in[0] == in[1])
    return false;
  const int z = in[0] == bn ? in[1] : in[0];
  if (z == 0 || !s.layers[p]->absorb_add_relu()) return false;  // z: a layer's output
  fused_[p] = 2;
  absorbed_[a] = absorbed_[a + 1] = true;
  host_[a] = host_[a + 1] = p;
  run_inputs_[p] = {inputs_[p][0], z};
  run_inputs_[a] = {bn};
  return true;
}

std::vector<LayerInfo> Model::layers() const {
  const Stack& s = *stacks_.at({max_batch_, 0});
  std::vector<LayerInfo> out;
  for (std::size_t i = 0; i < s.layers.size(); ++i) {
    const Layer& l = *s.layers[i];
    LayerInfo info;
    info.type = l.type();
    info.name = specs_[i].name;
    info.inputs = inputs_[i];
    info.arguments = l.arguments();
    info.output = l.output_shape().with_n(1);
    info.stage = specs_[i].stage;
    std::size_t weights = 0;
    for (const ParamDef& d : l.param_defs()) {
      info.params += d.shape.count();
      if (weights == 0) weights = d.shape.count();
    }
    const auto pixels = static_cast<double>(info.output.h) * info.output.w;
    info.forward_flops = info.type == "conv" || info.type == "dense"
                             ? 2.0 * static_cast<double>(weights) * pixels
                             : static_cast<double>(info.output.count());
    out.push_back(std::move(info));
  }
  return out;
}

std::size_t Model::fused_layers() const {
  return static_cast<std::size_t>(std::count(absorbed_.begin(), absorbed_.end(), true));
}

std::size_t Model::in_place_gradient_sums() const {
  std::size_t n = 0;
  for (const auto& step : plan_->backward)
    n += static_cast<std::size_t>(
        std::count(step.adds_in_place.begin(), step.adds_in_place.end(), true));
  return n;
}

Backend& Model::backend() const {
  DT_ASSERT(backend_ != nullptr, "model: a layout-only model has no backend");
  return *backend_;
}

Model::Stack& Model::stack_for(int n) {
  DT_ASSERT(backend_ != nullptr, "model: a layout-only model cannot run");
  DT_ASSERT(n >= 1 && n <= max_batch_, "batch of " + std::to_string(n) + " exceeds the model's");
  // Layers keep what their backward needs from forward (batch-norm statistics, pooling indices):
  // each activation slot (a micro-batch in flight) has layers of its own.
  auto it = stacks_.find({n, slot_});
  if (it == stacks_.end()) {
    auto stack = make_stack(n, backend_);
    bind(*stack);
    it = stacks_.emplace(std::make_pair(n, slot_), std::move(stack)).first;
  }
  return *it->second;
}

void Model::bind(Stack& s) {
  // Every stack's layers point into the same flat buffers, which move only in place_gradients(),
  // which binds every stack again.
  std::size_t pi = 0, si = 0;
  for (std::size_t i = 0; i < s.layers.size(); ++i) {
    const auto& adds = plan_->backward[i].adds_in_place;
    if (std::find(adds.begin(), adds.end(), true) != adds.end())
      s.layers[i]->set_accumulate_dx(true);
  }
  for (std::size_t i = 0; i < s.layers.size(); ++i) {
    if (!inside(i)) continue;
    Layer* l = s.layers[i].get();
    std::vector<float*> p, g, st;
    for (std::size_t k = 0; k < l->param_defs().size(); ++k, ++pi) {
      p.push_back(params_.data() + params_info_[pi].offset);
      g.push_back(grads_.data() + params_info_[pi].offset);
    }
    for (std::size_t k = 0; k < l->state_defs().size(); ++k, ++si)
      st.push_back(state_.data() + state_info_[si].offset);
    l->bind(p, g, st);
  }
}

void Model::initialize(std::uint64_t seed) {
  std::vector<float> host, state;
  initial_values(seed, host, state);
  Backend& be = backend();
  be.copy_to_device(params_.data(), host.data(), host.size() * sizeof(float));
  be.copy_to_device(state_.data(), state.data(), state.size() * sizeof(float));
}

void Model::initial_values(std::uint64_t seed, std::vector<float>& host,
                           std::vector<float>& state) const {
  host.assign(param_count_, 0.0f);
  for (std::size_t t = 0; t < params_info_.size(); ++t) {
    const TensorInfo& info = params_info_[t];
    std::mt19937_64 rng(mix_seed(seed, info.seed_index));
    std::normal_distribution<float> normal(0.0f, std::sqrt(2.0f / static_cast<float>(info.fan_in)));
    for (std::size_t i = 0; i < info.count; ++i) {
      float v = 0.0f;
      if (info.init == Init::ones) v = 1.0f;
      else if (info.init == Init::he_normal) v = normal(rng);
      host[info.offset + i] = v;
    }
  }
  state.assign(std::max<std::size_t>(state_count_, 1), 0.0f);
  for (const auto& info : state_info_)
    for (std::size_t i = 0; i < info.count; ++i)
      state[info.offset + i] = info.init == Init::ones ? 1.0f : 0.0f;
}

Layout Model::input_layout() const {
  return backend().differs_from_nchw(sample_) ? Layout::nhwc : Layout::nchw;
}

const void* Model::input_at(const void* x, int first) const {
  const std::size_t bytes = input_form_ == InputForm::network ? act_size_ : sizeof(float);
  return static_cast<const std::byte*>(x) +
         static_cast<std::size_t>(first) * sample_.sample_count() * bytes;
}

void Model::place_gradients(float* storage) {
  DT_REQUIRE(backend_ != nullptr && backend_->device() == Device::cpu,
             "model: gradients can be placed in host memory on a CPU backend only");
  const std::size_t n = param_count_ + kGradSpare;
  if (storage == nullptr && !grads_placed_) return;
  DeviceBuffer<float> to = storage != nullptr ? DeviceBuffer<float>::borrow(storage, n)
                                              : DeviceBuffer<float>(*backend_, n);
  std::memcpy(to.data(), grads_.data(), n * sizeof(float));
  grads_ = std::move(to);
  grads_placed_ = storage != nullptr;
  for (auto& [key, stack] : stacks_) bind(*stack);
}

std::size_t Model::device_bytes() const {
  return (params_.size() + (grads_placed_ ? 0 : grads_.size()) + state_.size() + input_f32_.size() +
          logits_f32_.size() + grad_sum_.size()) *
             sizeof(float) +
         arena_.size() + input_.size();
}

namespace {
/// " input=3,7" (layer numbers, 1-based; 0 = data) when the inputs are not just the previous layer.
std::string wiring(const std::vector<int>& in, std::size_t i) {
  if (in.size() == 1 && in[0] == static_cast<int>(i)) return "";
  std::string s = " input=";
  for (std::size_t k = 0; k < in.size(); ++k) {
    if (k) s += ',';
    s += std::to_string(in[k]);
  }
  return s;
}
}  // namespace

std::string Model::signature() const {
  std::ostringstream os;
  os << "input " << sample_.str() << " classes " << num_classes_ << "\n";
  const Stack& s = *stacks_.at({max_batch_, 0});
  std::size_t pi = 0, si = 0;
  for (std::size_t i = 0; i < s.layers.size(); ++i) {
    const auto& l = s.layers[i];
    os << l->describe() << wiring(inputs_[i], i);
    if (!inside(i)) {  // a pipeline stage lists its own tensors only
      os << "\n";
      continue;
    }
    for (std::size_t k = 0; k < l->param_defs().size(); ++k, ++pi)
      os << " " << params_info_[pi].name << ":" << params_info_[pi].shape.str();
    for (std::size_t k = 0; k < l->state_defs().size(); ++k, ++si)
      os << " " << state_info_[si].name << ":" << state_info_[si].shape.str();
    os << "\n";
  }
  return os.str();
}

std::string Model::summary() const {
  std::ostringstream os;
  const Stack& s = *stacks_.at({max_batch_, 0});
  os << "# model: input 1x" << sample_.c << "x" << sample_.h << "x" << sample_.w << ", "
     << num_classes_ << " classes, " << param_count_ << " parameters (" << param_count_ * 4 / 1024.0
     << " KiB), " << s.layers.size() << " layers\n";
  for (std::size_t i = 0; i < s.layers.size(); ++i) {
    const Shape o = s.layers[i]->output_shape();
    std::size_t np = 0;
    for (const auto& d : s.layers[i]->param_defs()) np += d.shape.count();
    std::string name = specs_[i].name.empty() ? "" : specs_[i].name;
    std::string from;
    if (!wiring(inputs_[i], i).empty()) {
      for (int t : inputs_[i]) {
        const std::string& n = t == 0 ? std::string(kInputName) : specs_[t - 1].name;
        from += from.empty() ? "  <- " : ",";
        from += n.empty() ? '#' + std::to_string(t) : n;
      }
    }
    if (absorbed_.size() > i && absorbed_[i])
      from += "  (runs inside #" + std::to_string(host_[i] + 1) + ")";
    char line[400];
    std::snprintf(line, sizeof line, "#  %3zu %-14s %-48s -> %-14s %9zu params%s\n", i + 1,
                  name.c_str(), s.layers[i]->describe().c_str(), o.with_n(1).str().c_str(), np,
                  from.c_str());
    os << line;
  }
  char line[200];
  std::snprintf(line, sizeof line,
                "# activation memory (training, batch %d): %.2f MiB for %zu tensors "
                "(at most %.2f MiB live at once)\n",
                max_batch_, static_cast<double>(activation_bytes_) / (1 << 20), plan_->buffers,
                static_cast<double>(plan_->peak_live_elements * act_size_) / (1 << 20));
  os << line;
  return os.str();
}

}  // namespace dtrain
