// dtrain/core/config.hpp — the effective configuration of a run: one options table (Boost.Program_
// options) serves the command line, INI job files and --help.
//
// Job files are INI; sections are for readability only: `[optimizer]\nlr = 0.1` sets `--lr`.
// The command line overrides the job file, key by key, and as a data source: --synthetic there
// drops the job file's --train-data/--test-data, --train-data or --test-data its --synthetic.
// Unknown keys and invalid values raise InputError naming the file or option and what was
// expected; named values (--optimizer sgd, ...) are parsed once into the enums of core/options.hpp.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "dtrain/core/options.hpp"

namespace dtrain {

/// Every option of a run, as parsed and validated by parse_config() (defaults below). Step counts
/// are global steps unless a comment says otherwise; sizes carry their unit (MiB, KiB, pixels).
struct Config {
  // data
  std::string train_data;  ///< HDF5 file (see docs/data.md)
  std::string test_data;   ///< HDF5 file; empty = no evaluation
  int num_classes = 0;     ///< > 0: the class count (labels must lie below it); 0: from the data
  std::int64_t cache_mb = 1024;  ///< in-memory training rows when they fit (MiB; 0: off)
  /// training augmentation: pad by N pixels, crop back to H×W at a random offset (0: off)
  int random_crop = 0;
  bool random_flip = false;  ///< training augmentation: horizontal flip with p = 1/2
  // encoded images (JPEG/PNG bytes, docs/data.md): decode pool and the ImageNet transforms
  int random_resized_crop = 0;  ///< training: RandomResizedCrop(S) to S×S pixels (0: centre crop)
  std::string rrc_scale = "0.08,1";   ///< its area fraction range "MIN,MAX" (parse_min_max())
  std::string rrc_ratio = "3/4,4/3";  ///< its aspect-ratio (w/h) range "MIN,MAX"
  int center_crop = 0;   ///< evaluation (and training without it): S×S (0: = random_resized_crop)
  int eval_resize = 0;   ///< shorter side before the centre crop (0: round(S / 0.875))
  int data_threads = 0;  ///< decode threads per reader (0: auto, see data_threads())
  OnBadImage on_bad_image = OnBadImage::skip;  ///< skip (count and leave out) | fail
  /// "CxHxW:classes": random images and labels instead of files (tf_cnn_benchmarks' synthetic data)
  std::string synthetic;
  std::int64_t synthetic_samples = 12800;  ///< samples in one synthetic training epoch
  // model
  std::vector<std::string> layers;  ///< one `layer =` line each (see layers/layer.hpp)
  // training
  Mode mode = Mode::async;  ///< async (Downpour through the ps) | sync (see Mode)
  /// async: a worker whose parameters are more than S global steps old waits for fresher ones
  /// before it computes (stale synchronous parallel); -1: unbounded (Downpour). S = 0 is bulk
  /// synchronous through the ps.
  int max_staleness = -1;
  /// sync through the ps: gradients each ps aggregates per global step (0: every worker); later
  /// ones are dropped, workers beyond R are backup workers (Chen et al. 2016)
  int replicas_to_aggregate = 0;
  StaleLr stale_lr = StaleLr::constant;                ///< async: learning rate of a stale push
  AsyncMomentum async_momentum = AsyncMomentum::dana;  ///< async: the ps's momentum rule
  /// async: DC-ASGD-a's λ0 (optim/delay_compensation.hpp); 0: off
  float delay_compensation = 0.0f;
  AsyncSchedule async_schedule = AsyncSchedule::sync_steps;  ///< async: unit of schedule steps
  int epochs = 1;                                            ///< passes over the training set (> 0)
  std::int64_t max_steps = 0;                                ///< global steps; 0 = no limit
  int batch_size = 64;                                       ///< per worker
  int global_batch_size = 0;    ///< if > 0: per-worker batch = global / workers (strong scaling)
  std::uint64_t seed = 1;       ///< seed of initialisation, data order, augmentation and dropout
  int log_every = 50;           ///< chief log line every N local steps of an epoch
  std::int64_t eval_every = 0;  ///< also evaluate every N global steps (0: at epoch ends only)
  /// a test accuracy, a fraction in [0, 1]: > 0 records the wall time and global step of the first
  /// evaluation that reaches it (results.json); 0: off
  double target_accuracy = 0;
  bool dry_run = false;  ///< validate, print the role and model tables, exit (no run dir)
  bool shuffle = true;   ///< reshuffle the training set every epoch (from seed)
  // optimizer
  OptimizerKind optimizer = OptimizerKind::momentum;  ///< sgd | momentum | adam | lars | lamb
  float lr = 0.05f;       ///< base learning rate (> 0), before --lr-scaling and schedule
  float momentum = 0.9f;  ///< momentum coefficient μ of the momentum optimizer (≥ 0)
  bool nesterov = false;  ///< Nesterov momentum
  /// Adam's β1 and β2, each in [0, 1), and ε (> 0)
  float beta1 = 0.9f, beta2 = 0.999f, adam_epsilon = 1e-8f;
  float lars_eta = 0.001f;    ///< LARS trust coefficient η (> 0; You et al. 2017)
  float lars_epsilon = 0.0f;  ///< LARS: added to the trust ratio's denominator (≥ 0)
  float weight_decay = 0.0f;  ///< L2 weight decay wd added to the gradient, g += wd·p (≥ 0)
  /// comma-separated kinds of parameters without weight decay: bias (*.bias), bn (batchnorm γ, β)
  std::string no_weight_decay_on;
  float label_smoothing = 0.0f;  ///< ε of the softmax cross-entropy target (1−ε)·onehot + ε/K
  LrSchedule lr_schedule = LrSchedule::constant;  ///< constant | step | cosine | poly
  /// linear warm-up over this many global steps (0: none). --mode async without --max-staleness
  /// and with --async-schedule sync-steps multiplies it, lr_step_size and lr_decay_steps by the
  /// workers (effective_for_workers)
  std::int64_t warmup_steps = 0;
  std::int64_t lr_step_size = 1000;  ///< step schedule: decay every N global steps
  float lr_gamma = 0.1f;             ///< step schedule factor
  std::int64_t lr_decay_steps = 0;   ///< cosine, poly: steps to reach lr_min (0 = the whole run)
  float lr_min = 0.0f;               ///< cosine and poly schedules: final learning rate (≥ 0)
  float lr_power = 2.0f;             ///< poly schedule: the power p of (1 − t/T)^p (> 0)
  /// none | linear: in sync mode multiply lr (and lr_min) by the number of workers (the linear
  /// scaling rule, Goyal et al. 2017), so that both modes use the same learning rate per sample:
  /// an async push applies --lr to one worker's batch, a sync step to workers × batch samples.
  LrScaling lr_scaling = LrScaling::none;
  // cluster
  /// parameter-server ranks (async: ≥ 1; sync: 0 for allreduce, K > 0 to aggregate on the ps),
  /// or auto (train/ps_count.hpp); the other ranks are workers
  PsCount num_ps = 1;
  DeviceOption device = DeviceOption::cpu;  ///< cpu | cuda | auto
  bool allow_gpu_sharing = false;           ///< allow more ranks than GPUs on a node
  MathOption math = MathOption::automatic;  ///< GPU conv/GEMM math: auto | tf32 | fp32 (MathMode)
  /// Activation memory order: auto | nchw | nhwc (dnn/backend.hpp Layout); auto is nhwc, except
  /// nchw on GPUs with --math fp32 in fp32 precision (train/trainer.hpp layout_of).
  LayoutOption layout = LayoutOption::automatic;
  Precision precision = Precision::fp32;  ///< activation precision: fp32 | bf16 (dnn/backend.hpp)
  bool debug_sync = false;                ///< GPU: synchronize and check after every layer
  bool cudnn_benchmark = false;  ///< GPU: time every convolution algorithm once (cudnnFind*)
  /// Layer fusion: auto (relu into the add or batchnorm before it, in-place gradient sums where
  /// the backend has them) | off (every layer alone). See Backend::set_fuse.
  FuseOption fuse = FuseOption::automatic;
  /// GPU: the step's forward, loss and backward as one CUDA graph: auto | on | off
  /// (cuda_graph_off_reason() below says where it is off).
  CudaGraphOption cuda_graph = CudaGraphOption::automatic;
  bool deterministic = false;  ///< GPU: deterministic cuDNN convolution algorithms only
  int conv_workspace_mb = 0;   ///< GPU: most workspace per convolution algorithm, MiB (0: 512)
  ConvApi conv_api = ConvApi::legacy;  ///< GPU: cuDNN's legacy convolution calls or graph API
  /// Model parallelism (model/pipeline_plan.hpp): pipeline stages P, micro-batches M per
  /// mini-batch (M divides batch_size) and their schedule (gpipe | 1f1b). P = 1, M = 1: none.
  int pipeline_stages = 1;
  std::string pipeline_profile;  ///< a saved worker profile: stages balanced by measured time
  int micro_batches = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  /// GPU profiling window "A:B": global steps [A, B) run between cudaProfilerStart and
  /// cudaProfilerStop (empty: none). See StepRange.
  std::string profile_steps;
  AllreduceOption allreduce = AllreduceOption::automatic;  ///< auto | mpi | hierarchical | nccl
  WireDtype wire_dtype =
      WireDtype::fp32;    ///< gradients between ranks (allreduce, ps pushes): fp32|bf16|fp16
  double bucket_mb = 25;  ///< sync allreduce bucket size, MiB (0: one bucket)
  /// sync allreduce: "off" (--bucket-mb's plan), a link (comm/network.hpp's spec) or "probe" (a
  /// measured one) whose latency sizes the buckets for the workers' ring (collectives/bucketed)
  std::string bucket_link = "off";
  bool overlap = true;       ///< CPU: allreduce buckets / ps push chunks during backward
  int threads = 0;           ///< OpenMP threads per rank; 0 = cores per node / ranks per node
  bool pin_threads = false;  ///< each rank's threads on its own block of CPUs (comm/affinity.hpp)
  int ps_chunk_kb = 1024;    ///< ps protocol payload chunk, KiB (ps/protocol.hpp)
  bool ps_shm = true;        ///< async pushes of a ps's own node through a shared ring
  int ps_threads = 1;        ///< OpenMP threads of a ps rank (its optimizer and aggregation);
                             ///< 0 = cores per node / ranks per node
  // checkpoints and output
  std::string run_dir = "runs/default";  ///< checkpoints, metrics.csv, results.json (non-empty)
  std::int64_t checkpoint_every = 0;     ///< global steps; 0 = only at the end (and each epoch end)
  double checkpoint_secs = 0;            ///< seconds between checkpoints (wall clock); 0 = off
  int keep_checkpoints = 3;              ///< how many newest checkpoints to keep (> 0)
  bool resume = false;                   ///< continue from the newest valid checkpoint in run_dir
  bool timeline = false;  ///< write a Chrome trace of every rank to <run_dir>/timeline.json
  bool summaries = true;  ///< the chief writes TensorBoard event files into run_dir
  std::int64_t summary_every = 0;  ///< train summaries every N global steps (0: every log row)
  // faults
  double timeout = 300.0;       ///< seconds a rank may wait in one communication before aborting
  bool skip_nonfinite = false;  ///< skip steps with non-finite gradients (false: stop the run)

  // inference (dtrain predict)
  /// train | predict | export | plan (train when none is given)
  Subcommand command = Subcommand::train;
  std::string checkpoint;  ///< predict: the checkpoint to score with
  std::string data;        ///< predict: HDF5 images (labels optional) to score
  std::string out;         ///< predict: the predictions file to create (never overwritten)
  // named tensors (train/pretrained.hpp)
  std::string init_from;     ///< train, predict: start from this safetensors file's tensors
  std::string init_exclude;  ///< comma-separated name prefixes --init-from leaves out
  ExportFormat export_format = ExportFormat::safetensors;  ///< export: --format safetensors | onnx
  ExportDtype export_dtype = ExportDtype::f32;             ///< export: --dtype f32 | bf16

  // scaling plan (dtrain plan, plan/scaling_model.hpp)
  int nodes = 1;                   ///< plan: nodes of the planned cluster
  int workers_per_node = 1;        ///< plan: worker ranks (GPUs, or cores) per node
  int cores_per_node = 0;          ///< plan: CPU cores of a node (0: its CPU work not priced)
  double straggler_cv = 0;         ///< plan: σ of a worker's step time / its mean (0: none)
  std::string network = "hdr-ib";  ///< plan: the link between nodes (comm/network.hpp)
  std::string intra_node = "shm";  ///< plan: the link inside a node
  std::string profile;             ///< plan: a saved worker profile to use instead of profiling
  std::string save_profile;        ///< plan: write the measured profile there (JSON)
  int plan_steps = 3;              ///< plan: timed steps of the profiling run (after one warm-up)
  /// plan: --mode / --num-ps came from the command line (then only that mode, that ps count)
  bool plan_mode_given = false, plan_num_ps_given = false;

  std::string config_file;    ///< the job file read, if any
  std::string effective_ini;  ///< the configuration as INI text (saved in checkpoints/run dir)
};

/// Result of parsing: either a Config, or text to print before exiting 0 (--help, --version).
struct ParseResult {
  Config config;
  bool help = false;      ///< print help_text and exit 0
  std::string help_text;  ///< --help: usage and every option; --version: "dtrain <version>\n"
};

/// Parses argv (and the job file named by --config). Validates every value. argv[1] may name the
/// subcommand, `train` (the default when argv[1] is an option), `predict` or `export`.
/// Throws InputError naming the option (and file) and what was expected.
ParseResult parse_config(int argc, const char* const* argv);

/// The workers' gradients one global step of a run of `workers` workers averages: 1 in async
/// mode (a push) and with --allreduce none (no sum: each worker its own), R =
/// min(--replicas-to-aggregate, workers) with sync through the ps when R is given (the workers
/// beyond R are backups), else `workers`. Pure.
int gradients_per_step(const Config& c, int workers);

/// The configuration a run of `workers` workers trains with (workers and ps alike): --lr-scaling
/// linear multiplies lr and lr_min by gradients_per_step() (the linear scaling rule, Goyal et al.
/// 2017: the same learning rate per sample whatever the step's batch); async
/// with --async-schedule sync-steps multiplies warmup_steps, lr_step_size and lr_decay_steps by
/// `workers` (one sync global step is W pushes).
Config effective_for_workers(const Config& c, int workers);

/// Which GradientExchange the configuration selects (see ExchangeKind).
ExchangeKind exchange_kind(const Config& c);

/// Why a GPU worker of a run with `workers` workers does not capture its step as a CUDA graph
/// (--cuda-graph; model/step_graphs.hpp), as a phrase naming the option ("--micro-batches 4
/// (...)"); empty where it does. The step is captured from the input upload's end to the last
/// gradient of backward: a step made of several passes, one that waits for the device inside
/// (--debug-sync), or one whose backward hands gradient buckets to NCCL as they complete is run
/// eagerly. The device (CPU workers never capture) is the caller's to check. Pure function of its
/// arguments.
std::string cuda_graph_off_reason(const Config& c, int workers);

/// True when a global step is one update from the gradients of several workers (allreduce, sync
/// through the ps, bounded staleness); false when it is one worker's push (async).
bool steps_aggregate_workers(const Config& c);

/// A window of global steps [begin, end), 0 ≤ begin < end (--profile-steps "A:B").
struct StepRange {
  std::int64_t begin = 0, end = 0;
  [[nodiscard]] bool empty() const { return end <= begin; }
  [[nodiscard]] bool contains(std::int64_t s) const { return s >= begin && s < end; }
};
/// Parses --profile-steps: "" gives an empty range; "A:B" with integers 0 ≤ A < B. Throws
/// InputError naming --profile-steps and the expected form otherwise.
StepRange parse_step_range(const std::string& spec);

/// Parses a "MIN,MAX" option value (--rrc-scale, --rrc-ratio): two numbers, each a decimal or a
/// fraction A/B (e.g. "3/4,4/3"), finite, > 0, MIN ≤ MAX. Throws InputError naming --`opt`, the
/// value and the expected form otherwise.
std::pair<double, double> parse_min_max(const std::string& opt, const std::string& spec);

/// The checks of each value alone (sizes > 0, ranges, parsed specs), without the constraints
/// between options. Throws InputError naming the option.
void check_each_value(const Config& c);

/// Validates every value (check_each_value) and the constraints between options. Throws
/// InputError naming the option.
void validate_config(const Config& c);

}  // namespace dtrain
