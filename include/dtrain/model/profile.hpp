// dtrain/model/profile.hpp — what one worker costs: per layer forward and backward ms at one batch
// size and the layer's gradient bytes, plus the optimizer update; the scaling model's input
// (plan/scaling_model.hpp). `dtrain plan` measures it (plan/profiler.hpp) or reads a saved one
// (--profile FILE), and can save it (--save-profile FILE) as JSON:
//
//   {"format": "dtrain-profile-1", "job": "jobs/resnet50_imagenet.ini", "batch": 24,
//    "device": "cpu", "threads": 1, "precision": "fp32", "steps": 3, "step_ms": 6616.1,
//    "optimizer_ms": 14.1, "layers": [{"name": "conv1", "forward_ms": 75.0, "backward_ms": 73.6,
//    "param_offset": 0, "param_floats": 9408}, ...]}   (docs/scaling/resnet50_cpu_vm_b24.json)
//
// Layers are in line order; param_offset/param_floats (floats) place the layer's parameters in
// the flat gradient buffer (model/model.hpp: parameters in line order), which is what the bucket
// plan cuts. step_ms is the median whole train step (forward, loss, backward), the layers' times
// their medians scaled to sum to it (plan/profiler.hpp); optimizer_ms the median update of every
// parameter on this worker.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "dtrain/model/model.hpp"  // LayerInfo

namespace dtrain {

/// One layer of a profile.
struct LayerCost {
  std::string name;              ///< "<index>.<type>" or the line's name=
  double forward_ms = 0;         ///< at WorkerProfile::batch samples
  double backward_ms = 0;        ///< at WorkerProfile::batch samples
  std::size_t param_offset = 0;  ///< first parameter float in the flat buffer
  std::size_t param_floats = 0;  ///< trainable floats (gradient bytes = 4 × this)
};

/// One worker's measured costs at `batch` samples per step.
struct WorkerProfile {
  std::string job;  ///< the job file profiled (informative)
  int batch = 0;    ///< samples per step the times were taken at (> 0)
  std::string device = "cpu";
  int threads = 1;  ///< OpenMP threads of the profiled rank
  std::string precision = "fp32";
  int steps = 0;                  ///< timed steps (after one warm-up step)
  double step_ms = 0;             ///< median of whole train steps (forward + loss + backward)
  double optimizer_ms = 0;        ///< median of one optimizer update of every parameter
  std::vector<LayerCost> layers;  ///< in line order

  [[nodiscard]] double forward_ms() const;         ///< Σ layers' forward_ms
  [[nodiscard]] double backward_ms() const;        ///< Σ layers' backward_ms
  [[nodiscard]] std::size_t param_floats() const;  ///< Σ layers' param_floats
  /// Bytes of one fp32 gradient of every parameter (4 × param_floats()).
  [[nodiscard]] double gradient_bytes() const { return 4.0 * static_cast<double>(param_floats()); }
  /// Whether the profiled workers ran on CPUs: device "cpu", or "cpu (…)" as a calibrated
  /// profile names its host.
  [[nodiscard]] bool on_cpu() const { return device.rfind("cpu", 0) == 0; }
};

/// Writes `p` as JSON to the new file `path`, whole or not at all (core/files.hpp
/// create_new_file: never over an existing file). Throws InputError naming `option` and the path
/// when it cannot be written or exists.
void save_profile(const WorkerProfile& p, const std::string& path, const std::string& option);

/// Reads a profile written by save_profile() (or by hand in that format). Throws InputError naming
/// `option` and the path for a missing or unreadable file, bad JSON, another format, a missing or
/// mistyped field, a batch, threads or steps that is not an integer in range (batch and threads
/// ≥ 1, steps ≥ 0, threads ≤ 2^16), no layers, a negative time, times that are all 0, or
/// parameter ranges that overlap or leave gaps (they must tile [0, Σ param_floats) in line order).
WorkerProfile load_profile(const std::string& path, const std::string& option);

/// Throws InputError naming `what` (the option and the profile's path) unless `p` is a profile
/// of the model whose layers are `keys` (layer_key() of each, in line order): the same number of
/// layers, each of the same "<index>.<type>" or name=. A profile of another job would price
/// another model.
void require_profile_of(const WorkerProfile& p, const std::vector<std::string>& keys,
                        const std::string& what);

/// Throws InputError naming `what` unless each layer of `p` has as many trainable floats as the
/// job's layer in the same place (`layers`: Model::layers(), as many as `p` has — check
/// require_profile_of() first). The same layer list at another width (dense units=1024 where the
/// profile had 128) passes require_profile_of() but would price another model's gradient bytes.
void require_profile_params(const WorkerProfile& p, const std::vector<LayerInfo>& layers,
                            const std::string& what);

/// Each layer's forward + backward ms from `p`, in line order, for cutting `layers`
/// (Model::layers()) into pipeline stages by measured time (--pipeline-profile, a profile saved by
/// `dtrain plan --save-profile` of the same job). Throws InputError naming `path` when the
/// profile has another number of layers, a layer of another name ("<index>.<type>" or name=) or
/// of another parameter count than the model: a profile of another job.
std::vector<double> layer_costs(const WorkerProfile& p, const std::vector<LayerInfo>& layers,
                                const std::string& path);

}  // namespace dtrain
