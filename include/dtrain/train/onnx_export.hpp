// dtrain/train/onnx_export.hpp — `dtrain export --format onnx`: a checkpoint's model as an ONNX
// inference graph (ModelProto of onnx/onnx.proto, vendored in third_party/onnx; IR version 8,
// operator set 17 of the default domain; https://onnx.ai/onnx/operators/).
//
// The graph takes `input`, float32 N×C×H×W (N a dynamic axis named "N"; C, H, W the model's): the
// tensor the network sees, i.e. the dataset's images after the normalization dtrain applies
// (docs/data.md), and gives `logits` (float32 N×classes) and `probabilities` (Softmax of the
// logits over the classes, what `dtrain predict` writes). Every parameter is an initializer under
// its tensor name (Model's TensorInfo::key, e.g. conv1.weight, in PyTorch's shape). Layer by layer
// (layers/layer.hpp), each node named after its layer (name=, else "<index>.<type>"):
//   conv          Conv (kernel_shape, strides, pads; B when the layer has a bias)
//   batchnorm     BatchNormalization in inference mode with the running statistics (the mean of
//                 the checkpoint's per-worker rows, as evaluation uses) and the layer's epsilon;
//                 not folded into the convolution, so the file holds the checkpoint's tensors
//   relu, sigmoid Relu, Sigmoid
//   maxpool       MaxPool; avgpool AveragePool with count_include_pad = 0 (dtrain's average
//                 leaves padding out); globalavgpool GlobalAveragePool
//   dense         Gemm with transB = 1 (weight [out, in]), after a Flatten when its input is 4-d
//   flatten       Flatten (axis 1); dropout nothing (identity at inference)
//   add           Add (two inputs) or Sum; concat Concat (axis 1); zeropad Pad (constant 0,
//                 channels only)
// Dense outputs are 2-d (N×units); a layer that needs 4-d input gets it back through Unsqueeze.
// Helper tensors are named "<layer>/<what>" ('/' appears in no layer name). The input, outputs
// and tensors keep their names; a layer's value or node whose name is taken already (a name=
// equal to a tensor's, e.g. c.weight, or to another layer's "<index>.<type>") gets "/out" (then
// "/out2", ...) appended, so every model dtrain builds exports.
#pragma once

#include <cstddef>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/io/checkpoint.hpp"
#include "dtrain/model/model.hpp"

namespace dtrain {

/// What an ONNX model is made of: a model's layers and tensors, the values of those tensors and
/// the text that goes with them. Pointers are borrowed for the duration of write_onnx().
struct OnnxGraph {
  Shape sample;                         ///< 1×C×H×W (Model::sample_shape())
  int classes = 0;                      ///< Model::num_classes()
  std::vector<LayerInfo> layers;        ///< Model::layers(), in line order
  std::vector<TensorInfo> params;       ///< Model::param_tensors()
  std::vector<TensorInfo> state;        ///< Model::state_tensors()
  const float* param_values = nullptr;  ///< param_count() floats, at TensorInfo::offset
  const float* state_values = nullptr;  ///< state_count() floats: the statistics to evaluate with
  std::vector<std::pair<std::string, std::string>> metadata;  ///< ModelProto.metadata_props
  std::string producer_version;                               ///< dtrain_version()
};

/// Counts of what write_onnx() wrote.
struct OnnxSummary {
  std::size_t nodes = 0;
  std::size_t initializers = 0;
};

/// ONNX's operator-set version of the default domain that dtrain writes.
inline constexpr int kOnnxOpset = 17;

/// Builds the ModelProto of `g` (see the top of this file) and serialises it to `out` (binary).
/// Nothing reaches `out` unless every layer maps. Throws InputError naming the layer (#, line
/// name, type) whose type has no ONNX mapping; LibraryError when the model cannot be serialised
/// (over protobuf's 2 GiB limit) or the stream fails.
OnnxSummary write_onnx(const OnnxGraph& g, std::ostream& out);

/// `dtrain export --format onnx`: checkpoint `s` (read from `checkpoint`) as an ONNX model created
/// at `out` (core/files.hpp create_new_file(): whole or not at all, never replacing a file), with
/// `metadata` as its metadata_props. The model is rebuilt from the configuration the checkpoint
/// carries (checkpoint_model()). Throws as checkpoint_model(), write_onnx() and create_new_file().
OnnxSummary export_onnx(const CheckpointState& s, const std::string& checkpoint,
                        const std::string& out,
                        const std::vector<std::pair<std::string, std::string>>& metadata);

}  // namespace dtrain
