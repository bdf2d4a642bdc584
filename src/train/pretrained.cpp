// dtrain/train/pretrained.cpp — named tensors in and out of dtrain (see pretrained.hpp): the strict
// --init-from mapping, the tensors `dtrain export` writes, and the export subcommand.
#include "dtrain/train/pretrained.hpp"

#include <mpi.h>

#include <cstring>
#include <map>
#include <sstream>

#include "dtrain/comm/guard.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/files.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/version.hpp"
#include "dtrain/dnn/bf16.hpp"
#include "dtrain/io/dataset.hpp"
#include "dtrain/train/checkpointer.hpp"
#include "dtrain/train/onnx_export.hpp"

namespace dtrain {
namespace {

std::string dims_str(const std::vector<std::int64_t>& d) {
  std::string s = "[";
  for (std::size_t i = 0; i < d.size(); ++i) s += (i ? ", " : "") + std::to_string(d[i]);
  return s + "]";
}

bool excluded(const std::string& name, const std::vector<std::string>& prefixes) {
  for (const auto& p : prefixes)
    if (name.rfind(p, 0) == 0) return true;
  return false;
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

/// "a, b, c" of at most 50 names, then "... (N in all)".
std::string listed(const std::vector<std::string>& names) {
  std::string out;
  for (std::size_t i = 0; i < names.size() && i < 50; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > 50) out += ", ... (" + std::to_string(names.size()) + " in all)";
  return out;
}

/// "6 tensors <verb>, 4 excluded (--init-exclude P: the seed's initialisation)".
std::string init_counts(const Config& c, const PretrainedValues& v, const std::string& verb) {
  return std::to_string(v.loaded) + " tensors " + verb +
         (v.excluded ? ", " + std::to_string(v.excluded) + " excluded (--init-exclude " +
                           c.init_exclude + ": the seed's initialisation)"
                     : std::string());
}

}  // namespace

std::vector<std::string> checkpoint_layers(const CheckpointState& s, const std::string& path,
                                           const std::string& advice) {
  std::vector<std::string> layers;
  std::istringstream ini(s.config);
  for (std::string line; std::getline(ini, line);)
    if (line.rfind("layer = ", 0) == 0) layers.push_back(line.substr(8));
  DT_REQUIRE(!layers.empty(), "checkpoint '" + path +
                                  "': the configuration it carries has no `layer =` lines (" +
                                  advice + ")");
  return layers;
}

std::unique_ptr<Model> checkpoint_model(const CheckpointState& s, const std::string& path) {
  const std::vector<std::string> layers = checkpoint_layers(
      s, path,
      "dtrain export rebuilds the model from them and takes no --config: this checkpoint exports "
      "to safetensors only if it names its tensors (format 2), never to ONNX; dtrain predict "
      "--config JOB, the job it was trained with, still scores with it");
  const CheckpointInput in = checkpoint_input(s, path);
  // in.sample is Shape::str() of one sample, "1xCxHxW": parse_synthetic() takes "CxHxW:K".
  const std::string chw = in.sample.rfind("1x", 0) == 0 ? in.sample.substr(2) : in.sample;
  const DatasetInfo sample = parse_synthetic(chw + ":" + std::to_string(in.classes));
  auto layout = std::make_unique<Model>(layers, sample.sample, in.classes, 1);
  DT_REQUIRE(layout->signature() == s.model_signature,
             "checkpoint '" + path +
                 "': the model rebuilt from the configuration it carries "
                 "does not match its model signature");
  return layout;
}

std::vector<std::string> init_exclude_prefixes(const std::string& list) {
  std::vector<std::string> out;
  std::stringstream in(list);
  for (std::string item; std::getline(in, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

PretrainedValues load_pretrained(const std::string& path, const Model& model,
                                 const std::vector<std::string>& exclude, std::uint64_t seed) {
  SafetensorsFile file;
  try {
    file = read_safetensors(path);
  } catch (const InputError& e) {  // the file's own fault: say which option named it
    throw InputError(error_prefix() + "option --init-from: " + without_error_prefix(e.what()));
  }
  PretrainedValues out;
  model.initial_values(seed, out.params, out.state);
  std::map<std::string, const SafeTensor*> by_name;
  for (const SafeTensor& t : file.tensors) by_name[t.name] = &t;
  std::vector<std::string> missing, mismatched, unexpected, not_float;
  std::map<std::string, bool> known;  // the model's names, and the num_batches_tracked it accepts
  const auto take = [&](const TensorInfo& t, std::vector<float>& into) {
    known[t.key] = true;
    if (ends_with(t.key, ".running_mean"))
      known[t.key.substr(0, t.key.size() - 12) + "num_batches_tracked"] = true;
    if (excluded(t.key, exclude)) {
      ++out.excluded;
      return;
    }
    const auto it = by_name.find(t.key);
    if (it == by_name.end()) {
      missing.push_back(t.key);
      return;
    }
    const SafeTensor& f = *it->second;
    if (f.shape != t.dims) {
      mismatched.push_back(t.key + " (file " + dims_str(f.shape) + ", model " + dims_str(t.dims) +
                           ")");
      return;
    }
    if (f.dtype != "F32" && f.dtype != "BF16" && f.dtype != "F16" && f.dtype != "F64") {
      not_float.push_back(t.key + " (" + f.dtype + ")");
      return;
    }
    const std::vector<float> v = safetensor_floats(f, path);
    std::memcpy(into.data() + t.offset, v.data(), v.size() * sizeof(float));
    ++out.loaded;
  };
  for (const TensorInfo& t : model.param_tensors()) take(t, out.params);
  for (const TensorInfo& t : model.state_tensors()) take(t, out.state);
  for (const SafeTensor& t : file.tensors)
    if (!known.count(t.name) && !excluded(t.name, exclude)) unexpected.push_back(t.name);
  if (missing.empty() && mismatched.empty() && unexpected.empty() && not_float.empty()) return out;
  std::string msg = "option --init-from: safetensors file '" + path +
                    "' does not fit this job's model (names as Model's tensor names, e.g. "
                    "conv1.weight; --init-exclude PREFIX leaves tensors out)";
  if (!missing.empty())
    msg += "; missing " + std::to_string(missing.size()) + ": " + listed(missing);
  if (!unexpected.empty())
    msg += "; unexpected " + std::to_string(unexpected.size()) + ": " + listed(unexpected);
  if (!mismatched.empty())
    msg += "; shape mismatch " + std::to_string(mismatched.size()) + ": " + listed(mismatched);
  if (!not_float.empty())
    msg += "; not floating-point " + std::to_string(not_float.size()) + ": " + listed(not_float);
  throw InputError(msg);
}

CheckpointState initial_point(const Config& c, const Model& layout, std::string& report) {
  PretrainedValues v =
      load_pretrained(c.init_from, layout, init_exclude_prefixes(c.init_exclude), c.seed);
  CheckpointState s;
  s.mode = std::string(to_string(c.mode));
  s.seed = c.seed;
  s.params = std::move(v.params);
  s.model_state = std::move(v.state);
  s.state_rows = 1;
  report = "# --init-from " + c.init_from + ": " + init_counts(c, v, "loaded");
  return s;
}

std::string check_init_from(const Config& c, const Model& layout) {
  const PretrainedValues v =
      load_pretrained(c.init_from, layout, init_exclude_prefixes(c.init_exclude), c.seed);
  return "# --init-from " + c.init_from +
         ": fits the model (names and shapes): " + init_counts(c, v, "to load");
}

std::vector<SafeTensor> export_tensors(const CheckpointState& s_in, const std::string& path,
                                       ExportDtype dtype) {
  CheckpointState s = s_in;       // names: its own, or its model's (format 1)
  if (s.param_tensors.empty()) {  // format 1: the names, and the sizes, from the model it names
    const std::unique_ptr<Model> model = checkpoint_model(s, path);
    check_inference_compatible(s, path, *model);
    name_tensors(s, *model);
  }  // format 2: read_checkpoint() checked that the names cover /params and /model_state
  const bool bf16 = dtype == ExportDtype::bf16;
  const auto floats = [&](const std::string& name, const std::vector<std::int64_t>& dims,
                          const float* v, std::size_t n) {
    SafeTensor t{name, bf16 ? "BF16" : "F32", dims, {}};
    t.data.resize(n * (bf16 ? 2 : 4));
    if (!bf16) {
      std::memcpy(t.data.data(), v, n * 4);
    } else {
      for (std::size_t i = 0; i < n; ++i) {
        const std::uint16_t h = float_to_bf16(v[i]);
        std::memcpy(t.data.data() + 2 * i, &h, 2);
      }
    }
    return t;
  };
  std::vector<SafeTensor> out;
  for (const CheckpointTensor& t : s.param_tensors)
    out.push_back(floats(t.name, t.dims, s.params.data() + t.offset, t.count));
  const std::size_t S =
      s.buffer_tensors.empty() ? 0 : s.buffer_tensors.back().offset + s.buffer_tensors.back().count;
  const std::vector<float> state =
      S ? mean_of_rows(s.model_state.data(), s.state_rows, S) : std::vector<float>{};
  for (const CheckpointTensor& t : s.buffer_tensors) {
    out.push_back(floats(t.name, t.dims, state.data() + t.offset, t.count));
    if (ends_with(t.name, ".running_var")) {  // PyTorch's BatchNorm counter, after its buffers
      SafeTensor n{t.name.substr(0, t.name.size() - 11) + "num_batches_tracked", "I64", {}, {}};
      n.data.resize(8);
      const std::int64_t steps = s.global_step;
      std::memcpy(n.data.data(), &steps, 8);
      out.push_back(std::move(n));
    }
  }
  return out;
}

int run_export(const Config& c) {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::string written;
  all_or_nothing(MPI_COMM_WORLD, [&] {
    if (rank != 0) return;
    require_new_file(c.out, "--out");  // before reading a checkpoint of maybe gigabytes
    const CheckpointState s = read_checkpoint(c.checkpoint);
    std::vector<std::pair<std::string, std::string>> metadata{
        {"dtrain.version", dtrain_version()},
        {"dtrain.checkpoint", c.checkpoint},
        {"dtrain.global_step", std::to_string(s.global_step)},
        {"dtrain.model_signature", s.model_signature},
        {"dtrain.job", s.config}};
    if (c.export_format == ExportFormat::onnx) {
      const OnnxSummary o = export_onnx(s, c.checkpoint, c.out, metadata);
      written = std::to_string(o.nodes) + " nodes, " + std::to_string(o.initializers) +
                " initializers (ONNX, opset " + std::to_string(kOnnxOpset) + ", float32)";
      return;
    }
    const std::vector<SafeTensor> tensors = export_tensors(s, c.checkpoint, c.export_dtype);
    metadata.emplace_back("format", "pt");
    write_safetensors(c.out, tensors, {metadata.begin(), metadata.end()});
    written = std::to_string(tensors.size()) + " tensors (safetensors, " +
              (c.export_dtype == ExportDtype::bf16 ? "BF16" : "F32") + ")";
  });
  if (rank == 0)
    log_info("dtrain export: checkpoint " + c.checkpoint + " -> " + c.out + ": " + written);
  return kExitOk;
}

}  // namespace dtrain
