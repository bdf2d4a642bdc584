// dtrain/train/pretrained.hpp — a trained model leaves dtrain and a pretrained one enters, by
// tensor name (Model's TensorInfo::key: torchvision's state_dict keys for the standard jobs):
//
//   dtrain export --checkpoint C.h5 --format safetensors --out M.safetensors [--dtype bf16]
//       the checkpoint's parameters and the batchnorm statistics evaluation uses (mean_of_rows of
//       the workers' rows), each under its name in PyTorch's shape, plus one I64 scalar
//       `<bn>.num_batches_tracked` per batchnorm (its global step, as PyTorch's state_dict has
//       one), so that torchvision's `load_state_dict(strict=True)` takes the file as it is;
//       __metadata__ holds format "pt", the job (the checkpoint's configuration), model signature,
//       global step, checkpoint path and dtrain version. Format-1 checkpoints (no names) are named
//       by rebuilding their model from the configuration they carry.
//   dtrain export --checkpoint C.h5 --format onnx --out M.onnx
//       the inference graph with the same tensors (train/onnx_export.hpp); the same metadata as
//       metadata_props.
//   dtrain [train] --init-from M.safetensors [--init-exclude fc.,...]
//   dtrain predict --init-from M.safetensors ...
//       starts from the file's tensors instead of the seed's initialisation (train) or a
//       checkpoint (predict). Strict, like load_state_dict(strict=True): every tensor of the model
//       whose name starts with no --init-exclude prefix must be in the file with the model's
//       shape, and every tensor of the file must be the model's or excluded (num_batches_tracked
//       is accepted and ignored); all mismatches are one InputError listing each. Excluded tensors
//       keep the seed's initialisation (a new head for fine-tuning). --resume from a checkpoint
//       has priority: --init-from only starts a run that has no checkpoint to continue (the file
//       is read all the same, before the run dir is made: a bad one leaves nothing behind).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "dtrain/core/config.hpp"
#include "dtrain/io/checkpoint.hpp"
#include "dtrain/io/safetensors.hpp"
#include "dtrain/model/model.hpp"

namespace dtrain {

/// --init-exclude "fc.,layer4.2." as prefixes (empty items dropped).
std::vector<std::string> init_exclude_prefixes(const std::string& list);

/// A model's starting values read from a safetensors file.
struct PretrainedValues {
  std::vector<float> params;  ///< model.param_count()
  std::vector<float> state;   ///< max(model.state_count(), 1): batchnorm running statistics
  std::size_t loaded = 0;     ///< tensors taken from the file
  std::size_t excluded = 0;   ///< tensors left at the seed's initialisation
};

/// Reads `path` (read_safetensors(); F32, BF16, F16 or F64 tensors) and maps it onto `model`'s
/// tensors by TensorInfo::key, strictly (see the top of this file); the tensors under an
/// `exclude` prefix get Model::initial_values(seed). Works on a layout-only model. Throws
/// InputError naming --init-from and the file: one message listing every missing tensor, every
/// unexpected one and every shape mismatch (file and model shapes), or what read_safetensors()
/// refuses.
PretrainedValues load_pretrained(const std::string& path, const Model& model,
                                 const std::vector<std::string>& exclude, std::uint64_t seed);

/// The start of a training run with --init-from (the chief's, read before the run dir is made; it
/// starts the run when there is no checkpoint to resume): a CheckpointState at global step 0
/// holding load_pretrained()'s parameters and one row of batchnorm statistics, no optimizer state
/// and an empty config (it is no checkpoint): what share_resume_point() hands every worker and
/// Checkpointer::restore() starts from. Sets `report` to the line to log when the run starts from
/// it: "# --init-from FILE: N tensors loaded[, M excluded (--init-exclude ...)]". Throws as
/// load_pretrained().
CheckpointState initial_point(const Config& c, const Model& layout, std::string& report);

/// --dry-run with --init-from: every check load_pretrained() makes of c.init_from against
/// `layout` (names, shapes, dtypes, the file's structure), nothing kept. Returns the line the dry
/// run prints: "# --init-from FILE: fits the model (names and shapes): N tensors to load[, M
/// excluded (--init-exclude ...)]". Throws as load_pretrained().
std::string check_init_from(const Config& c, const Model& layout);

/// The named tensors `dtrain export` writes for checkpoint `s` (read from `path`), in flat-buffer
/// order: parameters, then per batchnorm its running_mean, running_var (mean_of_rows over the
/// workers) and num_batches_tracked (I64 scalar = global step); floats as "F32" or, with dtype
/// "bf16", "BF16" (rounded to nearest even). Names from the checkpoint (format 2) or from its
/// model rebuilt from the configuration it carries (format 1). Throws InputError naming `path`
/// when neither gives names that fit its buffers.
std::vector<SafeTensor> export_tensors(const CheckpointState& s, const std::string& path,
                                       ExportDtype dtype);

/// The `layer =` lines of the configuration checkpoint `s` (read from `path`) carries, in order.
/// Throws InputError naming `path` when it carries none, ending with `advice` in parentheses:
/// what the command that needs them can do instead (predict: give --config JOB).
std::vector<std::string> checkpoint_layers(const CheckpointState& s, const std::string& path,
                                           const std::string& advice);

/// The model of checkpoint `s` (read from `path`), layout only: rebuilt from the `layer =` lines
/// of the configuration it carries, for its input shape and class count (checkpoint_input()).
/// For `dtrain export`, which takes no --config. Throws InputError naming `path` when it carries
/// no layer lines (saying what can still be done with it) or that model's signature is not the
/// checkpoint's, and what Model's constructor throws.
std::unique_ptr<Model> checkpoint_model(const CheckpointState& s, const std::string& path);

/// `dtrain export` (Subcommand::export_tensors) on MPI_COMM_WORLD: --format safetensors
/// (export_tensors(), write_safetensors()) or onnx (export_onnx()); rank 0 works, every rank agrees
/// on the outcome (one error, as run_predict()). Returns the exit code (0). Errors, with nothing
/// written: --out existing or its directory missing (checked before the checkpoint is read),
/// --checkpoint unreadable or not a dtrain checkpoint, a layer without an ONNX mapping.
int run_export(const Config& c);

}  // namespace dtrain
