// dtrain/train/onnx_export.cpp — a model's inference graph as an ONNX ModelProto (see
// onnx_export.hpp): one GraphBuilder walks the layers in line order, keeps for every tensor id
// (0 = the input, i + 1 = layer i's output) the ONNX value that holds it and its rank, and adds
// the nodes and initializers each layer maps to.
#include "dtrain/train/onnx_export.hpp"

#include <bit>
#include <map>
#include <memory>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "dtrain/core/error.hpp"
#include "dtrain/core/files.hpp"
#include "dtrain/core/version.hpp"
#include "dtrain/train/checkpointer.hpp"
#include "dtrain/train/pretrained.hpp"
#include "onnx/onnx.pb.h"

namespace dtrain {
namespace {

using Args = std::vector<std::pair<std::string, std::string>>;

/// An ONNX value holding a dtrain tensor: 4-d N×C×H×W, or 2-d N×C (a dense layer's output).
struct Value {
  std::string name;
  int rank = 4;
};

/// The argument `key` of a layer (Layer::arguments() always lists its type's keys).
const std::string& argument(const LayerInfo& l, const std::string& key) {
  for (const auto& [k, v] : l.arguments)
    if (k == key) return v;
  throw Error("onnx export: layer '" + l.type + "' has no argument " + key);
}

/// A window argument "K" or "HxW" as {H, W}.
std::vector<std::int64_t> window(const LayerInfo& l, const std::string& key) {
  const std::string& v = argument(l, key);
  const auto x = v.find('x');
  if (x == std::string::npos) return {std::stoll(v), std::stoll(v)};
  return {std::stoll(v.substr(0, x)), std::stoll(v.substr(x + 1))};
}

void set_ints(onnx::NodeProto& n, const std::string& name, const std::vector<std::int64_t>& v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INTS);
  for (std::int64_t x : v) a->add_ints(x);
}

void set_int(onnx::NodeProto& n, const std::string& name, std::int64_t v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

void set_float(onnx::NodeProto& n, const std::string& name, float v) {
  onnx::AttributeProto* a = n.add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(v);
}

/// A float32 value of shape [N, dims...] with N the dynamic batch axis.
void describe_value(onnx::ValueInfoProto& v, const std::string& name,
                    const std::vector<std::int64_t>& dims) {
  v.set_name(name);
  onnx::TypeProto_Tensor* t = v.mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  t->mutable_shape()->add_dim()->set_dim_param("N");
  for (std::int64_t d : dims) t->mutable_shape()->add_dim()->set_dim_value(d);
}

/// `s` with what is not UTF-8 in it as U+FFFD, as the safetensors writer's __metadata__ reads
/// (nlohmann::json's error_handler_t::replace): protobuf's strings are UTF-8, but the metadata
/// carries the job's paths, bytes on Linux.
std::string valid_utf8(const std::string& s) {
  return nlohmann::json::parse(
             nlohmann::json(s).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
      .get<std::string>();
}

/// The layer index a TensorInfo::name ("<index>.<type>.<param>") belongs to.
std::size_t layer_of(const TensorInfo& t) { return std::stoul(t.name); }

class GraphBuilder {
 public:
  GraphBuilder(const OnnxGraph& g, onnx::GraphProto& graph) : g_(g), graph_(graph) {
    for (const TensorInfo& t : g.params) params_[layer_of(t)].push_back(&t);
    for (const TensorInfo& t : g.state) state_[layer_of(t)].push_back(&t);
    // Names kept as they are: the graph's input and outputs, and the tensors' (unique in a
    // Model). Every other value takes what is left (fresh()).
    for (const char* name : {"input", "logits", "probabilities"}) values_used_.insert(name);
    for (const auto* list : {&g.params, &g.state})
      for (const TensorInfo& t : *list) values_used_.insert(t.key);
    shapes_.push_back(g.sample);
    values_.push_back({"input", 4});
    describe_value(*graph.add_input(), "input", {g.sample.c, g.sample.h, g.sample.w});
  }

  /// Adds layer i's nodes (its inputs are tensor ids below i + 1).
  void add_layer(std::size_t i) {
    const LayerInfo& l = g_.layers[i];
    const std::string name = l.name.empty() ? std::to_string(i) + "." + l.type : l.name;
    LayerRef at{l, i, name, fresh(values_used_, name)};
    values_.push_back(map_layer(at));
    shapes_.push_back(l.output);
  }

  /// The outputs: `logits` (the last layer's value as N×classes) and `probabilities`.
  void finish() {
    const Value& last = values_.back();
    // Node names of their own: a layer named logits or probabilities names its node so (ONNX
    // Runtime refuses two nodes of one name; a layer name holds no '/').
    node(last.rank == 4 ? "Flatten" : "Identity", {last.name}, "logits", "output/logits");
    if (last.rank == 4) set_int(*graph_.mutable_node(graph_.node_size() - 1), "axis", 1);
    set_int(node("Softmax", {"logits"}, "probabilities", "output/probabilities"), "axis", 1);
    describe_value(*graph_.add_output(), "logits", {g_.classes});
    describe_value(*graph_.add_output(), "probabilities", {g_.classes});
  }

 private:
  /// One layer being mapped.
  struct LayerRef {
    const LayerInfo& info;
    std::size_t index;
    std::string name;  ///< the layer's public name (its nodes' names)
    std::string out;   ///< the name of its output value: `name`, made unique (fresh())
  };

  Value map_layer(const LayerRef& l) {
    const std::string& t = l.info.type;
    if (t == "conv") return conv(l);
    if (t == "batchnorm") return batchnorm(l);
    if (t == "relu" || t == "sigmoid")
      return {node(t == "relu" ? "Relu" : "Sigmoid", {input(l, 0).name}, l.out, l.name).output(0),
              input(l, 0).rank};
    if (t == "maxpool" || t == "avgpool") return pool(l);
    if (t == "globalavgpool")
      return {node("GlobalAveragePool", {rank4(l, input(l, 0)).name}, l.out, l.name).output(0), 4};
    if (t == "dropout") return input(l, 0);  // identity at inference
    if (t == "flatten") return rank2(input(l, 0), l.out);
    if (t == "dense") return dense(l);
    if (t == "add" || t == "concat") return merge(l);
    if (t == "zeropad") return zeropad(l);
    throw InputError("dtrain export --format onnx: layer #" + std::to_string(l.index + 1) + " '" +
                     l.name + "' is of type '" + t +
                     "', which has no ONNX mapping (mapped: "
                     "conv, batchnorm, relu, sigmoid, maxpool, avgpool, globalavgpool, dropout, "
                     "flatten, dense, add, concat, zeropad); nothing was written");
  }

  Value conv(const LayerRef& l) {
    const std::vector<const TensorInfo*>& p = params_.at(l.index);
    std::vector<std::string> in{rank4(l, input(l, 0)).name};
    for (const TensorInfo* t : p) in.push_back(initializer(*t, g_.param_values));
    onnx::NodeProto& n = node("Conv", in, l.out, l.name);
    const auto pad = window(l.info, "pad");
    set_ints(n, "kernel_shape", window(l.info, "kernel"));
    set_ints(n, "strides", window(l.info, "stride"));
    set_ints(n, "pads", {pad[0], pad[1], pad[0], pad[1]});
    return {l.out, 4};
  }

  Value batchnorm(const LayerRef& l) {
    const std::vector<const TensorInfo*>& p = params_.at(l.index);  // γ, β
    const std::vector<const TensorInfo*>& s = state_.at(l.index);   // running mean, var
    const Value x = input(l, 0);
    onnx::NodeProto& n = node(
        "BatchNormalization",
        {x.name, initializer(*p.at(0), g_.param_values), initializer(*p.at(1), g_.param_values),
         initializer(*s.at(0), g_.state_values), initializer(*s.at(1), g_.state_values)},
        l.out, l.name);
    set_float(n, "epsilon", std::stof(argument(l.info, "eps")));
    return {l.out, x.rank};
  }

  Value pool(const LayerRef& l) {
    const bool max = l.info.type == "maxpool";
    onnx::NodeProto& n =
        node(max ? "MaxPool" : "AveragePool", {rank4(l, input(l, 0)).name}, l.out, l.name);
    const auto pad = window(l.info, "pad");
    set_ints(n, "kernel_shape", window(l.info, "kernel"));
    set_ints(n, "strides", window(l.info, "stride"));
    set_ints(n, "pads", {pad[0], pad[1], pad[0], pad[1]});
    if (!max) set_int(n, "count_include_pad", 0);
    return {l.out, 4};
  }

  Value dense(const LayerRef& l) {
    const std::vector<const TensorInfo*>& p = params_.at(l.index);  // weight [out, in], bias
    const Value x = rank2(input(l, 0), fresh(values_used_, l.name + "/flatten"));
    set_int(node("Gemm",
                 {x.name, initializer(*p.at(0), g_.param_values),
                  initializer(*p.at(1), g_.param_values)},
                 l.out, l.name),
            "transB", 1);
    return {l.out, 2};
  }

  /// add / concat: inputs of mixed rank all become 4-d.
  Value merge(const LayerRef& l) {
    std::vector<Value> in;
    int rank = 2;
    for (std::size_t k = 0; k < l.info.inputs.size(); ++k) {
      in.push_back(input(l, k));
      if (in.back().rank == 4) rank = 4;
    }
    std::vector<std::string> names;
    for (std::size_t k = 0; k < in.size(); ++k)
      names.push_back(rank == 4 ? rank4(l, in[k], "/" + std::to_string(k)).name : in[k].name);
    if (l.info.type == "concat") {
      set_int(node("Concat", names, l.out, l.name), "axis", 1);
    } else {
      node(names.size() == 2 ? "Add" : "Sum", names, l.out, l.name);
    }
    return {l.out, rank};
  }

  Value zeropad(const LayerRef& l) {
    const Value x = input(l, 0);
    const int c = shapes_.at(static_cast<std::size_t>(l.info.inputs.at(0))).c;
    const std::int64_t first = (l.info.output.c - c) / 2, after = l.info.output.c - c - first;
    const std::vector<std::int64_t> pads =
        x.rank == 4 ? std::vector<std::int64_t>{0, first, 0, 0, 0, after, 0, 0}
                    : std::vector<std::int64_t>{0, first, 0, after};
    node("Pad", {x.name, int64_initializer(l.name + "/pads", pads)}, l.out, l.name);
    return {l.out, x.rank};
  }

  /// Input k of layer l.
  const Value& input(const LayerRef& l, std::size_t k) const {
    return values_.at(static_cast<std::size_t>(l.info.inputs.at(k)));
  }

  /// v as 4-d N×C×1×1 (Unsqueeze of a 2-d value; a 4-d one as it is).
  Value rank4(const LayerRef& l, const Value& v, const std::string& tag = "") {
    if (v.rank == 4) return v;
    const std::string out = fresh(values_used_, l.name + "/unsqueeze" + tag);
    node("Unsqueeze", {v.name, int64_initializer(out + "/axes", {2, 3})}, out, out);
    return {out, 4};
  }

  /// v as 2-d N×(C·H·W) under the name `out`, one fresh() gave (Flatten of a 4-d value; a 2-d
  /// one as it is).
  Value rank2(const Value& v, const std::string& out) {
    if (v.rank == 2) return v;
    set_int(node("Flatten", {v.name}, out, out), "axis", 1);
    return {out, 2};
  }

  /// A node computing the value `out` (a name fresh() gave, or an output's), named `name` (else
  /// `out`) made unique among the nodes (ONNX Runtime refuses two nodes of one name).
  onnx::NodeProto& node(const std::string& op, const std::vector<std::string>& in,
                        const std::string& out, const std::string& name = "") {
    onnx::NodeProto* n = graph_.add_node();
    n->set_op_type(op);
    n->set_name(fresh(nodes_used_, name.empty() ? out : name));
    for (const auto& i : in) n->add_input(i);
    n->add_output(out);
    return *n;
  }

  /// Tensor t of `values` as a float32 initializer named t.key (kept for it by the constructor),
  /// in t.dims; returns its name.
  std::string initializer(const TensorInfo& t, const float* values) {
    onnx::TensorProto* p = graph_.add_initializer();
    p->set_name(t.key);
    p->set_data_type(onnx::TensorProto::FLOAT);
    for (std::int64_t d : t.dims) p->add_dims(d);
    p->set_raw_data(values + t.offset, t.count * sizeof(float));  // little-endian, as ONNX's
    return t.key;
  }

  /// An int64 initializer holding v, named `name` made unique (fresh()); returns its name.
  std::string int64_initializer(const std::string& name, const std::vector<std::int64_t>& v) {
    onnx::TensorProto* p = graph_.add_initializer();
    p->set_name(fresh(values_used_, name));
    p->set_data_type(onnx::TensorProto::INT64);
    p->add_dims(static_cast<std::int64_t>(v.size()));
    for (std::int64_t x : v) p->add_int64_data(x);
    return p->name();
  }

  /// `name`, or when `used` has it already `name/out`, `name/out2`, ... (the first that is free),
  /// now in `used`. ONNX assigns a value once and ONNX Runtime refuses two nodes of one name, but
  /// a model may give one name to two layers (a name= equal to another layer's "<index>.<type>")
  /// or to a layer and a tensor (name=c.weight after a layer c); the later one yields.
  static std::string fresh(std::set<std::string>& used, const std::string& name) {
    std::string candidate = name;
    for (int k = 1; !used.insert(candidate).second; ++k)
      candidate = name + "/out" + (k == 1 ? "" : std::to_string(k));
    return candidate;
  }

  const OnnxGraph& g_;
  onnx::GraphProto& graph_;
  std::map<std::size_t, std::vector<const TensorInfo*>> params_, state_;  ///< by layer index
  std::vector<Value> values_;                                             ///< by tensor id
  std::vector<Shape> shapes_;                       ///< by tensor id, per sample
  std::set<std::string> values_used_, nodes_used_;  ///< names given to values, to nodes
};

}  // namespace

OnnxSummary write_onnx(const OnnxGraph& g, std::ostream& out) {
  static_assert(std::endian::native == std::endian::little, "raw_data is little-endian");
  onnx::ModelProto m;
  m.set_ir_version(onnx::IR_VERSION_2021_7_30);  // 8: the IR of ONNX 1.10-1.12 (opset 17)
  m.set_producer_name("dtrain");
  m.set_producer_version(g.producer_version);
  m.set_doc_string("dtrain inference graph: input N x C x H x W float32 (normalized as dtrain "
                   "reads the dataset) -> logits, probabilities (N x classes)");
  onnx::OperatorSetIdProto* opset = m.add_opset_import();
  opset->set_domain("");
  opset->set_version(kOnnxOpset);
  for (const auto& [k, v] : g.metadata) {
    onnx::StringStringEntryProto* e = m.add_metadata_props();
    e->set_key(valid_utf8(k));
    e->set_value(valid_utf8(v));
  }
  onnx::GraphProto& graph = *m.mutable_graph();
  graph.set_name("dtrain");
  GraphBuilder b(g, graph);
  for (std::size_t i = 0; i < g.layers.size(); ++i) b.add_layer(i);
  b.finish();
  // Serialised first: a failed write is then the stream's (create_new_file names the file and
  // the system's reason, e.g. a full disk), not taken for protobuf's size limit.
  std::string bytes;
  if (!m.SerializeToString(&bytes))
    throw LibraryError("onnx export: the model could not be serialised (" +
                       std::to_string(m.ByteSizeLong()) + " bytes; protobuf's limit is 2 GiB)");
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  return {static_cast<std::size_t>(graph.node_size()),
          static_cast<std::size_t>(graph.initializer_size())};
}

OnnxSummary export_onnx(const CheckpointState& s, const std::string& checkpoint,
                        const std::string& out,
                        const std::vector<std::pair<std::string, std::string>>& metadata) {
  const std::unique_ptr<Model> model = checkpoint_model(s, checkpoint);
  check_inference_compatible(s, checkpoint, *model);
  const std::vector<float> state =
      model->state_count() ? mean_of_rows(s.model_state.data(), s.state_rows, model->state_count())
                           : std::vector<float>{};
  OnnxGraph g;
  g.sample = model->sample_shape();
  g.classes = model->num_classes();
  g.layers = model->layers();
  g.params = model->param_tensors();
  g.state = model->state_tensors();
  g.param_values = s.params.data();
  g.state_values = state.data();
  g.metadata = metadata;
  g.producer_version = dtrain_version();
  OnnxSummary summary;
  create_new_file(out, [&](std::ostream& o) { summary = write_onnx(g, o); });
  return summary;
}

}  // namespace dtrain
