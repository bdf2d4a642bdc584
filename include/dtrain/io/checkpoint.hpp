// dtrain/io/checkpoint.hpp — atomic, checksummed, resumable HDF5 checkpoints.
//
// File `<run_dir>/ckpt-<global_step, 10 digits>.h5`, written by the chief alone (in async mode the
// chief first gathers every ps's shard with a SNAPSHOT request: "gathered to one writer").
// Protocol: write `<name>.tmp`, H5Fflush + fsync, close, rename to `<name>`, fsync the directory;
// so a crash leaves either the previous checkpoint or a `.tmp` that --resume never picks. Every
// dataset carries HDF5's Fletcher32 checksum, verified on read; the root attribute metadata_crc32
// (CRC-32, Boost.CRC) covers the rest — the attributes and every dataset's shape — and is verified
// on read when present (older files lack it). The newest `keep` checkpoints are kept.
//
// Layout: /params (P floats), /optimizer/m, /optimizer/v (P floats or empty), /model_state
// (W×S floats: batchnorm running statistics of each worker), root attributes format_version,
// global_step, epoch, step_in_epoch, seed, num_workers, batch_size, steps_per_epoch (the last two
// absent in older files), mode, model_signature, config, wall_seconds. Format 2 adds the named
// tensors: /tensors/<name> for every parameter, in PyTorch's layout and shape (conv weight OIHW
// [O, I, kH, kW], dense weight [out, in], biases and batchnorm γ/β [C]), and /buffers/<name> for
// every batchnorm buffer, [W, C] (worker w's statistics in row w; PyTorch's tensor is their mean,
// mean_of_rows()), named as Model's TensorInfo::key ("layer1.0.bn2.weight"); root attributes
// param_names and buffer_names list them in flat-buffer order. Each is an HDF5 virtual dataset over
// its range of /params or /model_state: h5ls, h5py and every HDF5 reader see a dataset of that
// shape, while the bytes are stored (and checksummed) once, in the flat buffers — so named tensors
// cost a checkpoint no write or read time (docs/checkpoints.md). Format 1 (no names) still reads.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace dtrain {

inline constexpr int kCheckpointFormatVersion = 2;

/// One named tensor of a checkpoint: a contiguous range of a flat buffer (params or one row of
/// model_state), in flat-buffer order.
struct CheckpointTensor {
  std::string name;                ///< TensorInfo::key, e.g. "conv1.weight"
  std::vector<std::int64_t> dims;  ///< PyTorch's shape; product = the range's length
  std::size_t offset = 0;          ///< first float in the buffer
  std::size_t count = 0;           ///< floats
};

/// Everything one checkpoint holds (the file layout above); what write_checkpoint() writes and
/// read_checkpoint() returns.
struct CheckpointState {
  int format_version = kCheckpointFormatVersion;
  /// Global steps (updates) applied to `params`: the step training resumes at; names the file
  std::int64_t global_step = 0;
  std::int64_t epoch = 0;          ///< epoch in progress (0-based)
  std::int64_t step_in_epoch = 0;  ///< local steps of that epoch already done (data cursor)
  /// Async: each worker's local steps of the epoch done, in worker order (num_workers entries),
  /// where all workers stopped together (a stop or --max-steps checkpoint; dataset
  /// /worker_steps_in_epoch); empty otherwise, when every worker resumes at step_in_epoch
  std::vector<std::int64_t> worker_steps_in_epoch;
  std::uint64_t seed = 0;  ///< data order and dropout are pure functions of seed + counters
  int num_workers = 1;     ///< workers (data-parallel replicas) of the run that wrote it
  /// The writer's batch per worker and global steps per epoch (TrainPlan), which give global_step,
  /// epoch and step_in_epoch their meaning; 0 in a file written before they were recorded
  std::int64_t batch_size = 0, steps_per_epoch = 0;
  std::string mode;                ///< "sync" | "async"
  std::string model_signature;     ///< Model::signature()
  std::string config;              ///< effective configuration (INI)
  double wall_seconds = 0;         ///< training time before this checkpoint
  std::vector<float> params;       ///< P floats
  std::vector<float> m, v;         ///< optimizer state: P floats each, or empty
  std::vector<float> model_state;  ///< state_rows × S floats
  /// Rows of model_state: one per worker, in worker order, where workers step in lockstep
  /// (allreduce); else 1 (the chief's statistics)
  int state_rows = 1;
  /// Format 2: the parameters' names and shapes (covering params in order) and the batchnorm
  /// buffers' (covering one row of model_state). Empty for a format-1 file; write_checkpoint()
  /// then stores no names.
  std::vector<CheckpointTensor> param_tensors, buffer_tensors;
};

/// The batchnorm statistics evaluation uses, from `rows` rows of S floats each (row-major, e.g. a
/// checkpoint's model_state or the workers' statistics gathered in worker order): their mean,
/// accumulated in double in row order and rounded once to float, so rows that are all equal give
/// that row bit for bit. Training averages the workers' statistics with this function and
/// `dtrain predict` applies it to a checkpoint, so both evaluate with the same bits. row_count ≥ 1
/// (not checked: 0 gives NaNs).
std::vector<float> mean_of_rows(const float* rows, int row_count, std::size_t S);

/// Path of the checkpoint of `global_step` in run_dir.
std::string checkpoint_path(const std::string& run_dir, std::int64_t global_step);

/// Writes atomically (see above) and removes all but the newest `keep` complete checkpoints up to
/// s.global_step (a file of a later step is not this run's, e.g. one --resume skipped as corrupt:
/// neither counted nor removed); keep ≥ 1 (--keep-checkpoints, validated positive; 0 would remove
/// the file just written). Writes format 2's layout, s.format_version (kCheckpointFormatVersion
/// unless a test says otherwise) in its attribute; s.param_tensors / s.buffer_tensors, when given,
/// must cover params / one model_state row exactly, in order (Error otherwise). Throws LibraryError
/// on I/O failure — HDF5 (a full disk: "No space left on device"), fsync, or the rename (naming
/// both paths); the previous checkpoints are untouched then, and the partial `.tmp` is removed.
void write_checkpoint(const std::string& run_dir, const CheckpointState& s, int keep);

/// Reads and verifies one checkpoint (format 1 or 2; format 2 fills param_tensors and
/// buffer_tensors from its name lists and the named datasets' shapes). Throws InputError naming
/// the file when it is not a dtrain checkpoint, has a newer format version, fails its checksums /
/// is truncated, its names do not cover its buffers, or its parts disagree: an impossible position
/// (global_step, epoch, step_in_epoch < 0; step_in_epoch > steps_per_epoch where recorded;
/// num_workers < 1) or an /optimizer/m, /optimizer/v of other than one value per parameter or none;
/// or its metadata is corrupt: a dataset size past its stored maximum, a shape too large to hold,
/// attributes or shapes that fail metadata_crc32.
CheckpointState read_checkpoint(const std::string& path);

/// The global_step of a checkpoint's file name, "ckpt-" + 10 digits + ".h5" (checkpoint_path()'s
/// spelling), or -1 for any other name (a path with folders too).
std::int64_t step_of_checkpoint_name(std::string_view name);

/// Complete checkpoints in run_dir, newest (highest global_step) first; `.tmp` files excluded.
std::vector<std::string> list_checkpoints(const std::string& run_dir);

/// The partial files (`ckpt-<step>.h5.tmp`) in run_dir that a run left when it ended while writing
/// a checkpoint (a crash, a second signal), sorted by name.
std::vector<std::string> partial_checkpoints(const std::string& run_dir);

/// Reads the newest checkpoint that verifies (read_checkpoint(), and its global_step is the one its
/// file name says). A corrupt newer one is reported with log_warn (loudly, naming the file and
/// why) and the previous one is used. std::nullopt when run_dir holds
/// no readable checkpoint.
std::optional<CheckpointState> load_latest_checkpoint(const std::string& run_dir);

/// Throws InputError naming `path` when the checkpoint does not fit this run: another model
/// signature (the first differing layer is quoted), another mode, a parameter count mismatch, or
/// — when `optimizer` is given (resuming a training run) — another --optimizer than the one its
/// config records (the optimizer state m, v would not mean what this run's update expects).
void check_checkpoint_compatible(const CheckpointState& s, const std::string& path,
                                 const std::string& model_signature, const std::string& mode,
                                 std::size_t param_count, const std::string& optimizer = "");

/// The value of `key` in the effective configuration checkpoint `s` carries (CheckpointState::
/// config, INI "key = value" lines): the first such line's, or std::nullopt where it has none (a
/// file written before the key existed).
std::optional<std::string> config_value(const CheckpointState& s, const std::string& key);

/// Whether run_dir exists; where it does, throws InputError naming it unless it is a writable
/// directory (a regular file, no permission). Reads only: prepare_run_dir()'s checks of an
/// existing run dir, for --dry-run.
bool check_existing_run_dir(const std::string& run_dir);

/// Makes sure run_dir exists (creating it) and is a writable directory; throws InputError naming
/// it otherwise (a regular file, no permission).
void prepare_run_dir(const std::string& run_dir);

/// The files of a run's outputs other than checkpoints present in run_dir, by name, sorted:
/// results.json, metrics.csv, config.ini, timeline.json, events.out.tfevents.* (a run that
/// crashed before its first checkpoint leaves some of them). Empty when run_dir does not exist.
std::vector<std::string> run_outputs(const std::string& run_dir);

}  // namespace dtrain
