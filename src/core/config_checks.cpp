// src/core/config_checks.cpp — validate_config(): the checks a parsed Config must pass before a run
// starts, each an InputError naming the option and what was expected.
#include <cmath>
#include <filesystem>
#include <string>
#include <utility>

#include "config_table.hpp"
#include "dtrain/core/config.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/synthetic_spec.hpp"

namespace dtrain {

using config_detail::to_text;
namespace fs = std::filesystem;

namespace {

// Both refuse NaN and infinity too: a number the run could not use.
void positive(const std::string& opt, double v) {
  if (!(v > 0) || !std::isfinite(v))
    throw InputError("option --" + opt + ": must be a finite number > 0, got " + to_text(v));
}
void non_negative(const std::string& opt, double v) {
  if (!(v >= 0) || !std::isfinite(v))
    throw InputError("option --" + opt + ": must be a finite number >= 0, got " + to_text(v));
}

/// Input, decoding, steps and batches: each value alone.
void check_input_values(const Config& c) {
  if (!c.synthetic.empty()) (void)parse_synthetic_spec(c.synthetic);  // InputError naming it
  non_negative("num-classes", c.num_classes);
  non_negative("random-crop", c.random_crop);
  non_negative("random-resized-crop", c.random_resized_crop);
  const auto scale = parse_min_max("rrc-scale", c.rrc_scale);
  (void)parse_min_max("rrc-ratio", c.rrc_ratio);
  DT_REQUIRE(scale.second <= 1, "option --rrc-scale '" + c.rrc_scale +
                                    "': MAX is a fraction of the image's area, expected <= 1");
  non_negative("center-crop", c.center_crop);
  non_negative("eval-resize", c.eval_resize);
  non_negative("data-threads", c.data_threads);
  // No stored image is wider than 2^20 (io/image.cpp); a side beyond made every image "bad".
  for (const auto& [opt, v] :
       {std::pair{"random-resized-crop", c.random_resized_crop},
        std::pair{"center-crop", c.center_crop}, std::pair{"eval-resize", c.eval_resize}})
    DT_REQUIRE(v <= 1 << 20, std::string("option --") + opt + ": at most 1048576 pixels, got " +
                                 std::to_string(v));
  DT_REQUIRE(c.data_threads <= 1024,
             "option --data-threads: at most 1024 decode threads per rank, got " +
                 std::to_string(c.data_threads));
  non_negative("cache-mb", c.cache_mb);
  (void)parse_step_range(c.profile_steps);  // InputError naming --profile-steps
  // Boost reads "-1" into the unsigned seed as 2^64 − 1: refuse what only a negative number gives.
  DT_REQUIRE(c.seed <= static_cast<std::uint64_t>(INT64_MAX),
             "option --seed: must be an integer from 0 to 9223372036854775807, got " +
                 std::to_string(c.seed) + " (a negative number?)");
  positive("epochs", c.epochs);
  positive("batch-size", c.batch_size);
  positive("pipeline-stages", c.pipeline_stages);
  positive("micro-batches", c.micro_batches);
  non_negative("global-batch-size", c.global_batch_size);
  non_negative("max-steps", static_cast<double>(c.max_steps));
  positive("log-every", c.log_every);
  non_negative("eval-every", static_cast<double>(c.eval_every));
  DT_REQUIRE(c.target_accuracy >= 0 && c.target_accuracy <= 1,
             "option --target-accuracy: must be in [0, 1] (0: off), got " +
                 to_text(c.target_accuracy));
}

/// The optimizer and its schedule: each value alone.
void check_optimizer_values(const Config& c) {
  positive("lr", c.lr);
  non_negative("momentum", c.momentum);
  DT_REQUIRE(c.momentum < 1, "option --momentum: must be in [0, 1) (the velocity would grow "
                             "without bound), got " +
                                 to_text(c.momentum));
  non_negative("weight-decay", c.weight_decay);
  DT_REQUIRE(c.label_smoothing >= 0 && c.label_smoothing < 1,
             "option --label-smoothing: must be in [0, 1), got " + to_text(c.label_smoothing));
  std::stringstream list(c.no_weight_decay_on);
  for (std::string item; std::getline(list, item, ',');)
    DT_REQUIRE(item == "bias" || item == "bn",
               "option --no-weight-decay-on: unknown parameter kind '" + item +
                   "' (expected a comma-separated list of bias, bn)");
  non_negative("warmup-steps", static_cast<double>(c.warmup_steps));
  positive("lr-step-size", static_cast<double>(c.lr_step_size));
  positive("lr-gamma", c.lr_gamma);
  non_negative("lr-decay-steps", static_cast<double>(c.lr_decay_steps));
  non_negative("lr-min", c.lr_min);
  positive("lr-power", c.lr_power);
  positive("lars-eta", c.lars_eta);
  non_negative("lars-eps", c.lars_epsilon);
  DT_REQUIRE(c.beta1 >= 0 && c.beta1 < 1, "option --beta1: must be in [0, 1)");
  DT_REQUIRE(c.beta2 >= 0 && c.beta2 < 1, "option --beta2: must be in [0, 1)");
  positive("adam-epsilon", c.adam_epsilon);
}

/// Sizes and deadlines of the cluster, its output and its communication, and the modes' numbers:
/// each value alone.
void check_cluster_values(const Config& c) {
  non_negative("num-ps", c.num_ps);
  non_negative("threads", c.threads);
  non_negative("ps-threads", c.ps_threads);
  DT_REQUIRE(c.ps_chunk_kb >= 1 && c.ps_chunk_kb <= 1024 * 1024,
             "option --ps-chunk-kb: must be a size in KiB from 1 to 1048576, got " +
                 std::to_string(c.ps_chunk_kb));
  non_negative("checkpoint-every", static_cast<double>(c.checkpoint_every));
  non_negative("checkpoint-secs", c.checkpoint_secs);
  positive("keep-checkpoints", c.keep_checkpoints);
  non_negative("summary-every", static_cast<double>(c.summary_every));
  positive("timeout", c.timeout);
  // A wait's deadline becomes a std::chrono duration in nanoseconds (int64): past ~292 years it
  // would wrap. 30 days bounds every wait well inside that and above any batch job's wall time.
  constexpr double kMaxTimeout = 30.0 * 24 * 3600;
  DT_REQUIRE(c.timeout <= kMaxTimeout,
             "option --timeout: must be at most 2592000 seconds (30 days), got " +
                 to_text(c.timeout));
  DT_REQUIRE(c.conv_workspace_mb >= 0 && c.conv_workspace_mb <= 1 << 20,
             "option --conv-workspace-mb: must be in [0, 1048576] MiB, got " +
                 std::to_string(c.conv_workspace_mb));
  DT_REQUIRE(c.bucket_mb >= 0 && c.bucket_mb <= 2047,
             "option --bucket-mb: must be a size in MiB from 0 to 2047 (0: one bucket), got " +
                 to_text(c.bucket_mb));
  // A size below one float would round to 0 floats, which means one bucket: the opposite.
  DT_REQUIRE(c.bucket_mb == 0 || c.bucket_mb * 1048576 >= 4,
             "option --bucket-mb: " + to_text(c.bucket_mb) +
                 " MiB is less than one float (4 bytes = 0.0000038147 MiB); give at least that, "
                 "or 0 for one bucket");
  DT_REQUIRE(!c.run_dir.empty(), "option --run-dir: must not be empty");
  DT_REQUIRE(c.max_staleness >= -1,
             "option --max-staleness: must be >= 0, or -1 for unbounded; got " +
                 std::to_string(c.max_staleness));
  DT_REQUIRE(std::isfinite(c.delay_compensation) && c.delay_compensation >= 0.0f,
             "option --delay-compensation: must be a number >= 0 (0: off), got " +
                 to_text(c.delay_compensation));
  non_negative("replicas-to-aggregate", c.replicas_to_aggregate);
}

/// The data files or --synthetic, and --synthetic-samples.
void check_data_source(const Config& c) {
  if (!c.synthetic.empty()) {
    if (!c.train_data.empty() || !c.test_data.empty()) {
      const std::string files =
          (c.train_data.empty() ? "" : "--train-data '" + c.train_data + "'") +
          (c.train_data.empty() || c.test_data.empty() ? "" : " and ") +
          (c.test_data.empty() ? "" : "--test-data '" + c.test_data + "'");
      throw InputError("options --synthetic and --train-data/--test-data are mutually exclusive: "
                       "--synthetic '" +
                       c.synthetic + "' replaces the data files, but " + files +
                       (c.train_data.empty() || c.test_data.empty() ? " is" : " are") +
                       " set too (a job file's data files give way to --synthetic on the command "
                       "line, its --synthetic to --train-data or --test-data there)");
    }
    positive("synthetic-samples", static_cast<double>(c.synthetic_samples));
  } else if (c.command == Subcommand::train) {
    DT_REQUIRE(!c.train_data.empty(),
               "option --train-data: no training set given (or use --synthetic CxHxW:classes)");
  }
}

/// The options of `dtrain predict` and `dtrain export`, refused where they do not belong.
void check_subcommand(const Config& c) {
  if (c.command == Subcommand::train) {
    for (const auto& [opt, v] :
         {std::pair<const char*, const std::string&>{"checkpoint", c.checkpoint},
          {"data", c.data},
          {"out", c.out}})
      DT_REQUIRE(v.empty(), std::string("option --") + opt + " '" + v +
                                "': belongs to `dtrain predict`, and this is a training run (did "
                                "you mean `dtrain predict ...`? a training run resumes from its "
                                "--run-dir with --resume)");
  }
  if (c.command != Subcommand::plan)
    DT_REQUIRE(c.profile.empty() && c.save_profile.empty() && c.nodes == 1 &&
                   c.workers_per_node == 1 && c.cores_per_node == 0 && c.straggler_cv == 0,
               "options --nodes, --workers-per-node, --cores-per-node, --straggler-cv, --profile "
               "and --save-profile belong to `dtrain plan` (did you mean `dtrain plan ...`?)");
  if (c.command != Subcommand::export_tensors) {
    const Config defaults;
    DT_REQUIRE(c.export_format == defaults.export_format && c.export_dtype == defaults.export_dtype,
               "options --format and --dtype belong to `dtrain export` (did you mean `dtrain "
               "export ...`?)");
  }
  if (c.command == Subcommand::plan) {
    DT_REQUIRE(
        c.profile.empty() || c.save_profile.empty(),
        "option --save-profile '" + c.save_profile +
            "': saves the profile measured by the plan's profiling run, and with --profile '" +
            c.profile + "' nothing is measured (that file is the profile already)");
    DT_REQUIRE(c.save_profile.empty() || c.out.empty() ||
                   fs::absolute(c.save_profile).lexically_normal() !=
                       fs::absolute(c.out).lexically_normal(),
               "options --save-profile and --out: both name '" + c.out +
                   "'; the profile and the plan need a file each");
  }
  if (c.command == Subcommand::predict) {
    DT_REQUIRE(c.checkpoint.empty() != c.init_from.empty(),
               "dtrain predict: give exactly one of --checkpoint and --init-from");
    DT_REQUIRE(!c.data.empty(), "dtrain predict: option --data is required");
    DT_REQUIRE(!c.out.empty(), "dtrain predict: option --out is required");
    DT_REQUIRE(c.init_exclude.empty(),
               "option --init-exclude: dtrain predict scores with every tensor of --init-from; "
               "the excluded ones would be the seed's random initialisation");
  }
  DT_REQUIRE(c.init_exclude.empty() || !c.init_from.empty(),
             "option --init-exclude: only with --init-from");
  if (c.command == Subcommand::export_tensors) {
    DT_REQUIRE(!c.checkpoint.empty(), "dtrain export: option --checkpoint is required");
    DT_REQUIRE(!c.out.empty(), "dtrain export: option --out is required");
    // The model is the checkpoint's: a job's model (or another's) would be silently ignored.
    DT_REQUIRE(c.config_file.empty() && c.layers.empty() && c.data.empty() && c.init_from.empty(),
               "dtrain export: the model and its tensors are the checkpoint's; --config, "
               "--layer, --data and --init-from are not used (give --checkpoint, --format, --out "
               "and, for safetensors, --dtype)");
    DT_REQUIRE(c.export_format == ExportFormat::safetensors || c.export_dtype == ExportDtype::f32,
               "option --dtype: " + std::string(to_string(c.export_dtype)) +
                   " applies to --format safetensors; an ONNX export holds float32 tensors");
  }
}

/// Augmentation, decoding and the model.
void check_input_and_model(const Config& c) {
  const auto scale = parse_min_max("rrc-scale", c.rrc_scale);
  const auto ratio = parse_min_max("rrc-ratio", c.rrc_ratio);
  DT_REQUIRE(c.random_resized_crop > 0 ||
                 (scale == std::pair{0.08, 1.0} && ratio == std::pair{3.0 / 4.0, 4.0 / 3.0}),
             "options --rrc-scale / --rrc-ratio: set the ranges of --random-resized-crop, which "
             "is off (0)");
  DT_REQUIRE(
      c.synthetic.empty() || c.num_classes == 0,
      "option --num-classes: not used with --synthetic (its CxHxW:classes sets the classes)");
  // dtrain predict --checkpoint without layers: the model is the one the checkpoint carries.
  const bool model_from_checkpoint = c.command == Subcommand::predict && !c.checkpoint.empty();
  DT_REQUIRE(!c.layers.empty() || model_from_checkpoint,
             c.config_file.empty()
                 ? "no model: give --config JOB, the job file whose `layer =` lines describe it "
                   "(for predict --init-from, the job the tensors were trained with), or --layer "
                   "options"
                 : "option --layer: the model has no layers (give `layer =` lines in " +
                       c.config_file + ")");
}

/// The sync allreduce's path against the device.
void check_exchange_path(const Config& c) {
  DT_REQUIRE(!(c.allreduce == AllreduceOption::nccl && c.device == DeviceOption::cpu),
             "option --allreduce: nccl needs GPU workers (--device cuda); CPU workers take auto, "
             "mpi or hierarchical");
  DT_REQUIRE(!(c.allreduce == AllreduceOption::hierarchical && c.device == DeviceOption::cuda),
             "option --allreduce: hierarchical is for CPU workers (GPU workers: nccl, whose rings "
             "already run inside the node, or mpi)");
  DT_REQUIRE(c.allreduce != AllreduceOption::none ||
                 (exchange_kind(c) == ExchangeKind::allreduce && c.pipeline_stages == 1),
             "option --allreduce: none (no gradient sum, a benchmark) applies to sync allreduce "
             "training (--mode sync --num-ps 0) without --pipeline-stages");
}

/// --cuda-graph on: GPU workers and a step that can be captured.
void check_cuda_graph(const Config& c) {
  if (c.cuda_graph != CudaGraphOption::on) return;
  DT_REQUIRE(c.device != DeviceOption::cpu,
             "option --cuda-graph: on needs GPU workers (--device cuda); CPU workers take auto or "
             "off");
  const std::string why = cuda_graph_off_reason(c, 1);
  DT_REQUIRE(why.empty(), "option --cuda-graph: on, but the step cannot be captured: " + why +
                              " (use --cuda-graph auto or off)");
}

/// Steps, batches, micro-batches and pipeline stages, evaluation.
void check_steps_and_batches(const Config& c) {
  DT_REQUIRE(c.pipeline_profile.empty() || c.pipeline_stages > 1,
             "option --pipeline-profile: cuts pipeline stages by measured time, but "
             "--pipeline-stages is " +
                 std::to_string(c.pipeline_stages) + " (give --pipeline-stages P > 1)");
  // Each stage checks its own layers' gradients: the stages would skip different steps.
  DT_REQUIRE(!c.skip_nonfinite || c.pipeline_stages == 1,
             "option --skip-nonfinite: not with --pipeline-stages " +
                 std::to_string(c.pipeline_stages) +
                 ": each stage checks only its own layers' gradients, so the stages would skip "
                 "different steps (without it, a non-finite gradient ends the run; its last "
                 "checkpoint resumes it)");
  // With --global-batch-size, make_plan checks the per-worker batch it gives.
  DT_REQUIRE(c.global_batch_size > 0 || c.batch_size % c.micro_batches == 0,
             "option --micro-batches: " + std::to_string(c.micro_batches) +
                 " does not divide --batch-size " + std::to_string(c.batch_size) +
                 " (every micro-batch has the same number of samples)");
}

/// The learning-rate schedule against --lr.
void check_optimizer(const Config& c) {
  DT_REQUIRE((c.lr_schedule != LrSchedule::cosine && c.lr_schedule != LrSchedule::poly) ||
                 c.lr_min <= c.lr,
             "option --lr-min: the " + std::string(to_string(c.lr_schedule)) +
                 " schedule decays from --lr (" + to_text(c.lr) +
                 ") down to --lr-min, which must not exceed it; got " + to_text(c.lr_min));
}

/// Options only one mode reads, refused with another value than their default in the others
/// (where the run would silently ignore them).
void check_options_of_other_modes(const Config& c) {
  // The async ps's rules (ps/async_applier.cpp): another mode would silently ignore them.
  const bool plain_async = c.mode == Mode::async && c.max_staleness < 0;
  for (const auto& [opt, given] :
       {std::pair{"stale-lr", c.stale_lr != StaleLr::constant},
        std::pair{"async-momentum", c.async_momentum != AsyncMomentum::dana},
        std::pair{"async-schedule", c.async_schedule != AsyncSchedule::sync_steps}})
    DT_REQUIRE(!given || plain_async,
               std::string("option --") + opt +
                   ": applies to async training (--mode async without --max-staleness), where "
                   "the ps applies each push alone; this run is " +
                   (c.mode == Mode::sync ? "sync" : "SSP (--max-staleness)") +
                   " (leave it at its default there)");
  // The sync allreduce's settings where gradients go to parameter servers (--num-ps auto is a
  // ps mode): no allreduce runs there.
  const Config defaults;
  for (const auto& [opt, given] : {std::pair{"allreduce", c.allreduce != defaults.allreduce},
                                   std::pair{"bucket-mb", c.bucket_mb != defaults.bucket_mb},
                                   std::pair{"bucket-link", c.bucket_link != defaults.bucket_link}})
    DT_REQUIRE(!given || exchange_kind(c) == ExchangeKind::allreduce,
               std::string("option --") + opt +
                   ": sets the sync allreduce (--mode sync --num-ps 0), and this run sends its "
                   "gradients to parameter servers (" +
                   (c.mode == Mode::sync   ? "sync through the ps"
                    : c.max_staleness >= 0 ? "SSP"
                                           : "async") +
                   ", --num-ps " + to_text(c.num_ps) + "); leave it at its default there");
  // How the sync allreduce sends its sum, where --allreduce none sums nothing: no gradient leaves
  // a worker (results.json would record a wire no value took).
  for (const auto& [opt, given] : {std::pair{"wire-dtype", c.wire_dtype != defaults.wire_dtype},
                                   std::pair{"bucket-mb", c.bucket_mb != defaults.bucket_mb},
                                   std::pair{"bucket-link", c.bucket_link != defaults.bucket_link}})
    DT_REQUIRE(!given || c.allreduce != AllreduceOption::none,
               std::string("option --") + opt +
                   ": sets how the sync allreduce sends the gradients' sum, and --allreduce none "
                   "sums nothing (each worker applies its own gradient, none is sent); leave it "
                   "at its default there");
  // Parameter-server settings where there is none: sync allreduce.
  for (const auto& [opt, given] : {std::pair{"ps-threads", c.ps_threads != 1},
                                   std::pair{"ps-chunk-kb", c.ps_chunk_kb != 1024}})
    DT_REQUIRE(!given || c.num_ps.automatic || c.num_ps > 0,
               std::string("option --") + opt +
                   ": sets the parameter servers, and this run has none (--num-ps 0: sync "
                   "allreduce)");
}

/// The options of one mode (async staleness and delay compensation, sync backup workers).
void check_mode(const Config& c) {
  DT_REQUIRE(!(c.mode == Mode::async && c.num_ps == 0),
             "option --num-ps: async mode needs at least one parameter server (got 0); use "
             "--mode sync for allreduce without ps");
  DT_REQUIRE(c.max_staleness < 0 || c.mode == Mode::async,
             "option --max-staleness: bounds async training (--mode async); sync mode is bulk "
             "synchronous already");
  DT_REQUIRE(c.delay_compensation == 0.0f || (c.mode == Mode::async && c.max_staleness < 0),
             "option --delay-compensation: corrects stale pushes of async training (--mode async "
             "without --max-staleness)");
  // `dtrain plan` prices every mode from one job: a job's async rules do not bar it.
  if (c.command != Subcommand::plan) check_options_of_other_modes(c);
  DT_REQUIRE(c.replicas_to_aggregate == 0 || (c.mode == Mode::sync && c.num_ps > 0),
             "option --replicas-to-aggregate: applies to sync training through parameter servers "
             "(--mode sync --num-ps K > 0)");
}

}  // namespace

void check_each_value(const Config& c) {
  check_input_values(c);
  check_optimizer_values(c);
  check_cluster_values(c);
}

void validate_config(const Config& c) {
  check_data_source(c);
  check_subcommand(c);
  if (c.command == Subcommand::export_tensors) return;  // the model and data: the checkpoint's
  check_each_value(c);
  check_input_and_model(c);
  check_exchange_path(c);
  check_cuda_graph(c);
  check_steps_and_batches(c);
  check_optimizer(c);
  check_mode(c);
}

}  // namespace dtrain
