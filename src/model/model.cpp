// dtrain/model/model.cpp — sequential model over flat parameter/gradient/state buffers.
#include "dtrain/model/model.hpp"

#include <cmath>
#include <random>
#include <sstream>

#include "dtrain/core/error.hpp"
#include "dtrain/dnn/counter_rng.hpp"

namespace dtrain {

/// The layers built for one batch size, plus the loss op.
struct Model::Stack {
  std::vector<std::unique_ptr<Layer>> layers;
  std::unique_ptr<SoftmaxXentOp> loss;
};

namespace {
std::vector<TensorInfo> place(const std::vector<ParamDef>& defs, std::size_t layer,
                              const std::string& type, std::size_t& offset) {
  std::vector<TensorInfo> out;
  for (const auto& d : defs) {
    TensorInfo t;
    t.name = std::to_string(layer) + "." + type + "." + d.name;
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
}  // namespace

Model::Model(Backend& backend, const std::vector<std::string>& layer_lines, const Shape& sample,
             int num_classes, int max_batch)
    : backend_(backend), sample_(sample.with_n(1)), num_classes_(num_classes),
      max_batch_(max_batch) {
  DT_REQUIRE(!layer_lines.empty(), "model: no layers given (add `layer = ...` lines)");
  DT_REQUIRE(num_classes >= 2, "model: need at least 2 classes, got " +
                                   std::to_string(num_classes));
  DT_REQUIRE(max_batch >= 1, "model: batch size must be >= 1");
  for (const auto& line : layer_lines) specs_.push_back(parse_layer_spec(line));

  // Build the max-batch stack first: it fixes the tensor layout and validates every shape.
  auto stack = std::make_unique<Stack>();
  Shape shape = sample_.with_n(max_batch);
  std::size_t poff = 0, soff = 0;
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    auto layer = make_layer(specs_[i], shape, num_classes, backend);
    for (auto& t : place(layer->param_defs(), i, layer->type(), poff)) params_info_.push_back(t);
    for (auto& t : place(layer->state_defs(), i, layer->type(), soff)) state_info_.push_back(t);
    shape = layer->output_shape();
    stack->layers.push_back(std::move(layer));
  }
  DT_REQUIRE(shape.c == num_classes && shape.h == 1 && shape.w == 1,
             "model: the last layer '" + specs_.back().text + "' outputs " + shape.str() +
                 " but the loss needs N x " + std::to_string(num_classes) +
                 " x 1 x 1 (one logit per class; end with `layer = dense`)");
  param_count_ = poff;
  state_count_ = soff;
  params_ = DeviceBuffer<float>(backend, param_count_);
  grads_ = DeviceBuffer<float>(backend, param_count_);
  state_ = DeviceBuffer<float>(backend, std::max<std::size_t>(state_count_, 1));

  // Activations: acts_[0] is the input copy slot (unused), acts_[i+1] the output of layer i.
  acts_.emplace_back();
  dacts_.emplace_back();
  for (const auto& l : stack->layers) {
    acts_.emplace_back(backend, l->output_shape().count());
    dacts_.emplace_back(backend, l->output_shape().count());
  }
  stack->loss = backend.make_softmax_xent(max_batch, num_classes);
  bind(*stack);
  stacks_[max_batch] = std::move(stack);
}

Model::~Model() = default;

Model::Stack& Model::stack_for(int n) {
  DT_ASSERT(n >= 1 && n <= max_batch_, "batch of " + std::to_string(n) + " exceeds the model's");
  auto it = stacks_.find(n);
  if (it == stacks_.end()) {
    auto stack = std::make_unique<Stack>();
    Shape shape = sample_.with_n(n);
    for (const auto& spec : specs_) {
      stack->layers.push_back(make_layer(spec, shape, num_classes_, backend_));
      shape = stack->layers.back()->output_shape();
    }
    stack->loss = backend_.make_softmax_xent(n, num_classes_);
    bind(*stack);
    it = stacks_.emplace(n, std::move(stack)).first;
  }
  return *it->second;
}

void Model::bind(Stack& s) {
  // Every stack's layers point into the same flat buffers, which never move.
  std::size_t pi = 0, si = 0;
  for (auto& l : s.layers) {
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
  std::vector<float> host(param_count_);
  for (std::size_t t = 0; t < params_info_.size(); ++t) {
    const TensorInfo& info = params_info_[t];
    std::mt19937_64 rng(mix_seed(seed, t));
    std::normal_distribution<float> normal(0.0f, std::sqrt(2.0f / static_cast<float>(info.fan_in)));
    for (std::size_t i = 0; i < info.count; ++i) {
      float v = 0.0f;
      if (info.init == Init::ones) v = 1.0f;
      else if (info.init == Init::he_normal) v = normal(rng);
      host[info.offset + i] = v;
    }
  }
  backend_.copy_to_device(params_.data(), host.data(), host.size() * sizeof(float));
  std::vector<float> state(std::max<std::size_t>(state_count_, 1), 0.0f);
  for (const auto& info : state_info_)
    for (std::size_t i = 0; i < info.count; ++i)
      state[info.offset + i] = info.init == Init::ones ? 1.0f : 0.0f;
  backend_.copy_to_device(state_.data(), state.data(), state.size() * sizeof(float));
}

void Model::run_forward(Stack& s, const float* x, const StepContext& ctx) {
  const float* in = x;
  for (std::size_t i = 0; i < s.layers.size(); ++i) {
    StepContext lc = ctx;
    lc.seed = mix_seed(ctx.seed, i);
    s.layers[i]->forward(in, acts_[i + 1].data(), lc);
    in = acts_[i + 1].data();
  }
}

void Model::train_step(const float* x, const std::int32_t* labels, int n, float grad_scale,
                       std::uint64_t step_seed, float* stats) {
  if (n == 0) {
    backend_.fill(grads_.data(), 0.0f, param_count_);
    return;
  }
  Stack& s = stack_for(n);
  run_forward(s, x, StepContext{true, step_seed});
  const std::size_t L = s.layers.size();
  s.loss->forward_backward(acts_[L].data(), labels, n, grad_scale, dacts_[L].data(), stats);
  for (std::size_t i = L; i-- > 0;) {
    const float* in = i == 0 ? x : acts_[i].data();
    float* din = i == 0 ? nullptr : dacts_[i].data();
    s.layers[i]->backward(in, acts_[i + 1].data(), dacts_[i + 1].data(), din);
  }
}

void Model::evaluate(const float* x, const std::int32_t* labels, int n, float* stats) {
  if (n == 0) return;
  Stack& s = stack_for(n);
  run_forward(s, x, StepContext{false, 0});
  s.loss->forward_backward(acts_[s.layers.size()].data(), labels, n, 0.0f, nullptr, stats);
}

std::string Model::signature() const {
  std::ostringstream os;
  os << "input " << sample_.str() << " classes " << num_classes_ << "\n";
  const Stack& s = *stacks_.at(max_batch_);
  std::size_t pi = 0, si = 0;
  for (const auto& l : s.layers) {
    os << l->describe();
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
  const Stack& s = *stacks_.at(max_batch_);
  os << "# model: input 1x" << sample_.c << "x" << sample_.h << "x" << sample_.w << ", "
     << num_classes_ << " classes, " << param_count_ << " parameters ("
     << param_count_ * 4 / 1024.0 << " KiB)\n";
  for (std::size_t i = 0; i < s.layers.size(); ++i) {
    const Shape o = s.layers[i]->output_shape();
    std::size_t np = 0;
    for (const auto& d : s.layers[i]->param_defs()) np += d.shape.count();
    char line[200];
    std::snprintf(line, sizeof line, "#  %2zu  %-44s -> %-14s %8zu params\n", i,
                  s.layers[i]->describe().c_str(), o.with_n(1).str().c_str(), np);
    os << line;
  }
  return os.str();
}

}  // namespace dtrain
