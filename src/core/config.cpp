// dtrain/core/config.cpp — one Boost.Program_options table for the command line, INI job files and
// --help. Job-file sections are dropped from key names ("[optimizer] lr" is "--lr").
#include "dtrain/core/config.hpp"

#include <boost/program_options.hpp>
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iomanip>
#include <optional>
#include <sstream>
#include <string_view>

#include "dtrain/core/error.hpp"
#include "dtrain/core/synthetic_spec.hpp"
#include "dtrain/core/version.hpp"

namespace po = boost::program_options;

namespace dtrain {
namespace {

template <typename T>
std::string to_text(const T& v) {
  std::ostringstream os;
  if constexpr (std::is_same_v<T, bool>) {
    os << (v ? "true" : "false");
  } else if constexpr (std::is_floating_point_v<T>) {
    os << std::setprecision(9) << v;
  } else {
    os << v;
  }
  return os.str();
}

}  // namespace

/// Boost.Program_options' hook for the option enums (found by argument-dependent lookup; the
/// `int` last parameter beats Boost's generic `long` overload): the value's name, or an error
/// naming the option and the valid names.
template <NamedEnum E>
void validate(boost::any& out, const std::vector<std::string>& values, E*, int) {
  po::validators::check_first_occurrence(out);
  const std::string& v = po::validators::get_single_string(values);
  E value{};
  if (find_enum(v, value)) {
    out = value;
    return;
  }
  po::error_with_option_name e("option '%canonical_option%': invalid value '%value%' (expected " +
                               enum_choices<E>() + ")");
  e.set_substitute("value", v);
  throw e;
}

/// Boost.Program_options' hook for --num-ps: a count, or "auto".
void validate(boost::any& out, const std::vector<std::string>& values, PsCount*, int) {
  po::validators::check_first_occurrence(out);
  const std::string& v = po::validators::get_single_string(values);
  if (v == "auto") {
    out = PsCount::chosen_by_rule();
    return;
  }
  int k = 0;
  const auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), k);
  if (ec == std::errc() && end == v.data() + v.size()) {
    out = PsCount(k);
    return;
  }
  po::error_with_option_name e("option '%canonical_option%': invalid value '%value%' (expected a "
                               "count of ps ranks or auto)");
  e.set_substitute("value", v);
  throw e;
}

namespace {

/// The options table: each entry registers the option with Boost and remembers how to print its
/// current value (for the effective configuration).
class Table {
 public:
  struct Entry {
    std::string section, name;
    std::function<std::string()> value;
  };

  po::options_description& group(const std::string& title, const std::string& section) {
    groups_.emplace_back(std::make_unique<po::options_description>(title));
    section_ = section;
    return *groups_.back();
  }

  template <typename T>
  void add(const char* name, T* field, const char* help) {
    auto* v = po::value<T>(field)->default_value(*field, to_text(*field));
    if constexpr (std::is_same_v<T, bool>) v->implicit_value(true, "true");
    groups_.back()->add_options()(name, v, help);
    entries_.push_back({section_, name, [field] { return to_text(*field); }});
  }

  void add_list(const char* name, std::vector<std::string>* field, const char* help) {
    groups_.back()->add_options()(name, po::value<std::vector<std::string>>(field), help);
    entries_.push_back({section_, name, [field] {
                          std::string s;
                          for (std::size_t i = 0; i < field->size(); ++i)
                            s += (i ? "\nlayer = " : "") + (*field)[i];
                          return s;
                        }});
  }

  po::options_description all() const {
    po::options_description d("dtrain options (job file keys use the same names; the command "
                              "line overrides the job file)");
    for (const auto& g : groups_) d.add(*g);
    return d;
  }

  std::string effective_ini() const {
    std::ostringstream os;
    std::string section;
    for (const auto& e : entries_) {
      if (e.section != section) {
        section = e.section;
        os << "\n[" << section << "]\n";
      }
      os << e.name << " = " << e.value() << "\n";
    }
    return os.str();
  }

 private:
  std::vector<std::unique_ptr<po::options_description>> groups_;
  std::vector<Entry> entries_;
  std::string section_;
};

/// The options of one group of --help (and section of the job file), in --help order.
void add_data_options(Table& t, Config& c) {
  t.group("Data", "data");
  t.add("train-data", &c.train_data, "training set, HDF5 (images N×C×H×W uint8|float32, labels N)");
  t.add("test-data", &c.test_data, "test set, HDF5, evaluated after every epoch (empty: none)");
  t.add("num-classes", &c.num_classes,
        "number of classes K; every label must lie in [0, K) (0: the training file's `num_classes` "
        "attribute, else max label + 1 if that leaves at most half of the classes empty)");
  t.add("synthetic", &c.synthetic,
        "CxHxW:classes, e.g. 3x224x224:1000: random images and labels made once per worker (in "
        "device memory) replace the data files: compute and communication without I/O, as "
        "tf_cnn_benchmarks and Horovod's synthetic benchmark (empty: off; excludes --train-data "
        "and --test-data; on the command line it replaces a job file's)");
  t.add("synthetic-samples", &c.synthetic_samples, "samples in one synthetic training epoch");
  t.add("shuffle", &c.shuffle, "reshuffle the training set every epoch (from --seed)");
  t.add("cache-mb", &c.cache_mb,
        "hold a worker's training rows in memory, this many MiB at most: decoded pixels when all "
        "the rows it reads fit (one HDF5 read per epoch instead of one per run of rows in every "
        "batch); encoded images: the file's first rows that fit, loaded once and kept (no HDF5 "
        "read for them in any epoch); 0: read per batch");
  t.add("random-crop", &c.random_crop,
        "augment training images: pad by N pixels (with the normalized value of pixel 0) and crop "
        "back to HxW at a random offset, drawn from (--seed, epoch, sample) (0: off)");
  t.add("random-flip", &c.random_flip,
        "augment training images: mirror left-right with probability 1/2, drawn from (--seed, "
        "epoch, sample)");
  t.add("random-resized-crop", &c.random_resized_crop,
        "encoded images (JPEG/PNG in the file): train on SxS crops as torchvision "
        "RandomResizedCrop(S): area 8-100 %, aspect ratio 3/4-4/3 (--rrc-scale, --rrc-ratio), "
        "bilinear, drawn from (--seed, epoch, sample) (0: training images take the evaluation's "
        "centre crop)");
  t.add("rrc-scale", &c.rrc_scale,
        "MIN,MAX: --random-resized-crop's area fraction of the image, drawn uniformly "
        "(torchvision's `scale`; 0 < MIN <= MAX <= 1)");
  t.add("rrc-ratio", &c.rrc_ratio,
        "MIN,MAX: --random-resized-crop's aspect ratio w/h, drawn log-uniformly (torchvision's "
        "`ratio`; numbers or fractions A/B)");
  t.add("center-crop", &c.center_crop,
        "encoded images: evaluate on the central SxS crop after --eval-resize (0: the "
        "--random-resized-crop size)");
  t.add("eval-resize", &c.eval_resize,
        "encoded images: scale the shorter side to this many pixels before the centre crop (0: "
        "round(S / 0.875), 256 for 224)");
  t.add("data-threads", &c.data_threads,
        "encoded images: decode threads per worker (one is the prefetch thread itself)");
  t.add("on-bad-image", &c.on_bad_image,
        "encoded images: skip (a corrupt or truncated image is left out of its batch and counted "
        "in the log and results.json) | fail (the run stops naming the file and sample)");
}

void add_training_options(Table& t, Config& c) {
  t.group("Model", "model");
  t.add_list("layer", &c.layers,
             "one layer per occurrence, e.g. \"conv filters=32 kernel=3 pad=1\"");
  t.group("Training", "train");
  t.add("mode", &c.mode,
        "async: parameter servers apply every push on arrival (Downpour SGD) | sync: one update "
        "per global step from the workers' gradients (allreduce with --num-ps 0, else aggregated "
        "by the parameter servers)");
  t.add("max-staleness", &c.max_staleness,
        "async: a worker whose parameters are more than S global steps old waits for fresher ones "
        "before it computes (stale synchronous parallel; a global step is then one update from "
        "every worker's gradient, as in sync mode); 0 is bulk synchronous through the ps; -1: "
        "unbounded (Downpour)");
  t.add("replicas-to-aggregate", &c.replicas_to_aggregate,
        "sync with --num-ps > 0: each ps applies one update per global step from the first R "
        "gradients computed on that step's parameters and drops later ones; workers beyond R are "
        "backup workers (0: every worker)");
  t.add("epochs", &c.epochs, "passes over the training set");
  t.add("max-steps", &c.max_steps, "stop after this many global steps (0: no limit)");
  t.add("batch-size", &c.batch_size, "samples per worker per step");
  t.add("global-batch-size", &c.global_batch_size,
        "if > 0, samples per global step, split over the workers (strong scaling)");
  t.add("seed", &c.seed, "seed of initialisation, data order and dropout");
  t.add("log-every", &c.log_every, "chief log line every N steps");
  t.add("eval-every", &c.eval_every,
        "also evaluate the test set every N global steps (0: only after each epoch); sync: all "
        "workers at the same step; async: the chief alone on the whole test set while the others "
        "train on");
  t.add("target-accuracy", &c.target_accuracy,
        "record in results.json the wall time and global step of the first evaluation whose test "
        "accuracy reaches this (time_to_accuracy_seconds, step_at_accuracy; 0: off)");
  t.add("dry-run", &c.dry_run,
        "check the job (options, data, model graph, cluster shape, the --init-from file's names "
        "and shapes), print the role and model tables, and exit without training or writing "
        "anything");
}

void add_optimizer_options(Table& t, Config& c) {
  t.group("Optimizer", "optimizer");
  t.add("optimizer", &c.optimizer,
        "sgd | momentum | adam | lars (momentum with a per-tensor trust ratio, You et al. 2017) | "
        "lamb (Adam with a per-tensor trust ratio, You et al. 2020); lars and lamb leave biases "
        "and batchnorm parameters unadapted and undecayed; in the ps modes each ps holds whole "
        "tensors (--num-ps at most the model's tensor count) and applies an async push once it "
        "has arrived whole");
  t.add("lr", &c.lr, "base learning rate");
  t.add("momentum", &c.momentum, "momentum coefficient (momentum optimizer)");
  t.add("nesterov", &c.nesterov, "Nesterov momentum");
  t.add("beta1", &c.beta1, "Adam β1");
  t.add("beta2", &c.beta2, "Adam β2");
  t.add("adam-epsilon", &c.adam_epsilon, "Adam ε (and LAMB's)");
  t.add("lars-eta", &c.lars_eta,
        "LARS trust coefficient eta: a tensor's gradient is scaled by "
        "eta * |w| / (|g| + weight_decay * |w| + lars-eps)");
  t.add("lars-eps", &c.lars_epsilon, "LARS: added to the trust ratio's denominator");
  t.add("weight-decay", &c.weight_decay, "L2 weight decay added to the gradient");
  t.add("no-weight-decay-on", &c.no_weight_decay_on,
        "parameters without weight decay, comma-separated: bias (every *.bias), bn (batchnorm "
        "gamma and beta), e.g. bias,bn (empty: decay all)");
  t.add("label-smoothing", &c.label_smoothing,
        "label smoothing eps in [0, 1): the loss's target is (1 - eps) one-hot + eps / classes "
        "(Szegedy et al. 2016; test loss too)");
  t.add("lr-schedule", &c.lr_schedule,
        "constant | step | cosine | poly (after warm-up; poly: lr-min + (lr - lr-min) * "
        "(1 - t/T)^lr-power)");
  t.add("warmup-steps", &c.warmup_steps, "linear warm-up over this many global steps");
  t.add("lr-step-size", &c.lr_step_size, "step schedule: multiply by --lr-gamma every N steps");
  t.add("lr-gamma", &c.lr_gamma, "step schedule factor");
  t.add("lr-decay-steps", &c.lr_decay_steps,
        "cosine and poly schedule length after warm-up (0: the rest of the run)");
  t.add("lr-min", &c.lr_min, "cosine and poly schedules' final learning rate");
  t.add("lr-power", &c.lr_power, "poly schedule's power");
  t.add("lr-scaling", &c.lr_scaling,
        "none | linear: sync mode multiplies --lr by the number of workers (linear scaling rule)");
  t.add("stale-lr", &c.stale_lr,
        "async: learning rate of a push that is tau global steps stale: constant (lr) | inverse "
        "(lr / max(1, tau), staleness-aware async SGD, Zhang et al. 2016)");
  t.add("async-momentum", &c.async_momentum,
        "async: momentum the ps applies: lr-scaled (--momentum minus the implicit momentum "
        "1 - 1/W that W asynchronous workers add (Mitliagkas et al. 2016), scaled by lr(step) / "
        "--lr: full compensation at the peak learning rate, none as it decays) | compensated "
        "(minus 1 - 1/W throughout) | as-given, never below 0 | dana (default: --momentum kept per "
        "worker, each worker computes its gradient at the look-ahead position theta - lr * "
        "momentum * sum of the workers' momenta; DANA, Hakimi et al. 2019; with --optimizer sgd, "
        "adam, lars or lamb the update is as given)");
  t.add("delay-compensation", &c.delay_compensation,
        "async: lambda0 of delay-compensated async SGD (DC-ASGD-a, Zheng et al. 2017): the ps "
        "corrects each push g to g + lambda0 / sqrt(meansquare(g)) * g * g * (theta - theta_w), "
        "theta_w the parameters the worker computed it at; 0: off");
  t.add("async-schedule", &c.async_schedule,
        "async: what --warmup-steps, --lr-step-size and --lr-decay-steps count: sync-steps (global "
        "steps of a sync run of the same workers, W pushes each: the same schedule per sample as "
        "sync) | pushes (async global steps)");
}

void add_cluster_options(Table& t, Config& c) {
  t.group("Cluster", "cluster");
  t.add("num-ps", &c.num_ps,
        "parameter-server ranks (async; sync: 0 for allreduce, K > 0 to aggregate on the ps), or "
        "auto (enough that no ps serves more gradient bytes/s than it can: docs/training.md); the "
        "other ranks are workers");
  t.add("device", &c.device, "cpu | cuda | auto (cuda when the rank has a GPU)");
  t.add("allow-gpu-sharing", &c.allow_gpu_sharing, "allow more ranks than GPUs on a node");
  t.add("pin-threads", &c.pin_threads,
        "pin threads: the ranks of a node split its CPUs into disjoint blocks by node-local rank "
        "(each rank its launcher binding, if it has one), one OpenMP thread per CPU of the block, "
        "the sync allreduce's communication thread on a CPU of its own where the block has 2 or "
        "more; the role table lists each rank's CPUs (false: the OS places threads)");
}

/// The cluster group, continued: the GPU workers.
void add_device_options(Table& t, Config& c) {
  t.add(
      "math", &c.math,
      "GPU convolutions and matrix products: auto (tf32 on compute capability >= 8.0, as "
      "PyTorch's cudnn.allow_tf32) | tf32 (tensor cores, fp32 accumulation) | fp32 (full-precision "
      "FMA, matches the CPU backend)");
  t.add("layout", &c.layout,
        "memory order of the activations on the workers: auto | nchw | nhwc (channels last, "
        "PyTorch's channels_last: faster on the CPU, where oneDNN's batchnorm and wide "
        "convolutions read it in place, and for cuDNN's tensor-core convolutions and fused "
        "batchnorm). auto: nhwc, except nchw on GPUs with --math fp32 in fp32 precision (FMA "
        "convolutions run faster in NCHW). "
        "Parameters, checkpoints and the exchange are the same either way");
  t.add("precision", &c.precision,
        "activations on the workers: fp32 | bf16 (mixed precision as torch.autocast(bfloat16): "
        "bf16 activations and gradients of activations, fp32 master weights, optimizer, loss and "
        "exchange; native on GPUs of compute capability >= 8.0 and on AVX-512 CPUs (oneDNN's "
        "bf16 kernels, fast with AVX512_BF16 or AMX), emulated on other CPUs)");
  t.add("cudnn-benchmark", &c.cudnn_benchmark,
        "GPU convolutions: time every cuDNN algorithm once per problem when the model is built "
        "and run the fastest (PyTorch's cudnn.benchmark = True; seconds at start-up) instead of "
        "cuDNN's heuristic choice; ignored on the CPU");
  t.add("deterministic", &c.deterministic,
        "GPU convolutions: prefer cuDNN's deterministic algorithms, so that two runs on the same "
        "GPU give the same bits (PyTorch's cudnn.deterministic = True; may be slower); false: "
        "cuDNN's first choice, as PyTorch's default");
  t.add("conv-workspace-mb", &c.conv_workspace_mb,
        "GPU convolutions: the most workspace one cuDNN algorithm may use, in MiB (0: 512); the "
        "faster algorithms for large activations (VGG's first layers at batch 128) may need more");
  t.add("conv-api", &c.conv_api,
        "GPU convolutions: legacy (cuDNN's cudnnConvolution* calls and algorithm enums) | graph "
        "(cuDNN's graph API: each direction one operation, its engine from cuDNN's heuristics "
        "or, with --cudnn-benchmark, the fastest of their first 8 timed and of the timed legacy "
        "algorithm — the engines PyTorch's "
        "convolutions run; a direction no engine can run, or a tensor not 16-byte aligned, "
        "takes the legacy call); ignored on the CPU");
  t.add("fuse", &c.fuse,
        "layer fusion: auto (a relu runs inside the conv, add or batchnorm before it — the conv's "
        "bias + relu in one pass, one pass for a residual block's add + relu, cuDNN's fused "
        "batchnorm + relu on GPUs in the NHWC layout — and convolutions add their input gradient "
        "in place) | off (every layer alone: the parity reference; same results except bf16 sums "
        "rounded once instead of twice)");
  t.add("cuda-graph", &c.cuda_graph,
        "GPU: capture the training step's forward, loss and backward once per batch shape (after "
        "one eager warm-up step) and replay it as one CUDA graph, so that the host launches one "
        "graph instead of hundreds of kernels: auto (on GPU workers wherever the step is "
        "capturable — off with --micro-batches > 1, pipeline stages, --debug-sync, or NCCL "
        "summing buckets during backward — and eager launches after a capture error) | on (as "
        "auto, but a step that cannot be captured is an error) | off; ignored on the CPU");
  t.add("profile-steps", &c.profile_steps,
        "GPU profiling window A:B: global steps [A, B) run between cudaProfilerStart and "
        "cudaProfilerStop, so that `nsys profile --capture-range=cudaProfilerApi` or `ncu "
        "--profile-from-start off` record only those steady-state steps (empty: none)");
  t.add("debug-sync", &c.debug_sync,
        "GPU debugging: wait for the device after every layer and name the layer a CUDA fault "
        "comes from (slow; also DTRAIN_DEBUG_SYNC=1)");
}

/// The cluster group, continued: how gradients and parameters travel between ranks.
void add_exchange_options(Table& t, Config& c) {
  t.add("allreduce", &c.allreduce,
        "sync gradient exchange: auto (GPUs: nccl; CPU: hierarchical, or mpi where a node's "
        "workers cannot share memory) | mpi | hierarchical (the workers of a node sum through "
        "shared memory, one leader per node over MPI; CPU) | nccl (GPUs) | none (a benchmark, "
        "not training: no sum, each worker applies its own gradient (skipping it if non-finite), "
        "the workers in lock step: the compute ceiling of sync training without its exchange)");
  t.add("wire-dtype", &c.wire_dtype,
        "gradients between ranks as fp32 | bf16 | fp16 (rounded once, summed or applied in fp32 "
        "at the receiver: half the bytes): MPI allreduce (hierarchical: the node's shared memory "
        "and the leaders' hop, the node's sum rounded once more) and ps pushes (pulls stay fp32; "
        "a --ps-shm ring holds the rounded values in 32 bits)");
  t.add(
      "bucket-mb", &c.bucket_mb,
      "sync allreduce: the largest gradient bucket in MiB (PyTorch DDP's bucket_cap_mb, Horovod's "
      "fusion buffer); buckets are summed while backward still runs, the first and the last "
      "a 25th of this size (1 MiB at 25), those between doubling up to it; 0: one bucket");
  t.add("bucket-link", &c.bucket_link,
        "sync allreduce: off (default: --bucket-mb's plan) | the link the workers' ring crosses, "
        "as --network (25gbe | hdr-ib | nvlink | shm | alpha_us=A,beta_gbps=B[,shared=1]) | "
        "probe (measured at start: tiny and 4 MiB allreduces, the chief's figures for all): "
        "buckets, the end ones too, of at least p·α·β bytes for p workers, so that no bucket's "
        "latency exceeds its transfer time (collectives/bucketed.hpp); where that is below "
        "--bucket-mb's end size (small rings, one node) the plan is --bucket-mb's");
  t.add("overlap", &c.overlap,
        "on CPU: start each allreduce bucket, or send each ps push chunk, as soon as backward has "
        "produced it (false: the whole exchange after backward, for measuring what the overlap "
        "hides; ps modes with --skip-nonfinite always push after backward)");
  t.add("threads", &c.threads, "OpenMP threads per rank (0: cores per node / ranks per node)");
  t.add("ps-chunk-kb", &c.ps_chunk_kb,
        "parameter-server messages travel in chunks of this many KiB: a ps updates chunk c of a "
        "push and sends it back while chunk c + 1 arrives (any shard size, past 2 GiB too)");
  t.add("ps-shm", &c.ps_shm,
        "async: a worker on its ps's node pushes through a chunk ring in shared memory, so the ps "
        "only updates and each worker makes its own copies (false: MPI messages only)");
  t.add("ps-threads", &c.ps_threads,
        "OpenMP threads of each ps rank: the optimizer update and the sync aggregation run on them "
        "(0: cores per node / ranks per node; default 1: a ps sharing cores with workers)");
}

/// Model parallelism: pipeline stages, micro-batches, their schedule and cut.
void add_pipeline_options(Table& t, Config& c) {
  t.add(
      "pipeline-stages", &c.pipeline_stages,
      "model parallelism: cut the model into this many pipeline stages on as many ranks (balanced "
      "by flops, by --pipeline-profile's measured times, or at the layers' stage= keys); "
      "--dry-run prints the stage table");
  t.add("pipeline-profile", &c.pipeline_profile,
        "cut the pipeline stages by each layer's measured forward + backward time: a profile of "
        "this job saved by dtrain plan --save-profile FILE (empty: by flops)");
  t.add("micro-batches", &c.micro_batches,
        "micro-batches per mini-batch (must divide --batch-size): each worker runs them one after "
        "another and sums their gradients before the exchange (gradient accumulation; batchnorm "
        "statistics per micro-batch, as GPipe); with --pipeline-stages, the stage table's memory "
        "and bubble");
  t.add("schedule", &c.schedule,
        "pipeline schedule: 1f1b (PipeDream-Flush: stage s holds at most P - s micro-batches) | "
        "gpipe (all M micro-batches forward, then all backward)");
}

void add_output_options(Table& t, Config& c) {
  t.group("Checkpoints and output", "checkpoint");
  t.add("run-dir", &c.run_dir, "directory for checkpoints, metrics.csv and results.json");
  t.add("checkpoint-every", &c.checkpoint_every,
        "checkpoint every N global steps (0: only at epoch ends and the end)");
  t.add("keep-checkpoints", &c.keep_checkpoints, "how many newest checkpoints to keep");
  t.add("resume", &c.resume, "continue from the newest valid checkpoint in --run-dir");
  t.add("timeline", &c.timeline,
        "write <run-dir>/timeline.json: every rank's spans (data wait, forward, backward, "
        "allreduce / push-pull, optimizer, evaluation, checkpoint) as a Chrome trace for "
        "chrome://tracing or Perfetto (a resumed run overwrites it)");
  t.add("summaries", &c.summaries,
        "the chief writes TensorBoard event files (events.out.tfevents.*) into --run-dir: every "
        "metrics.csv row as scalars train/* and test/*; a resumed run adds a new file");
  t.add("summary-every", &c.summary_every,
        "write train summaries every N global steps (TF's save_summaries_steps; taken from the "
        "log rows, so at most one per --log-every interval); 0: every log row. Evaluations are "
        "always written");
  t.group("Inference (dtrain predict)", "predict");
  t.add("checkpoint", &c.checkpoint,
        "predict: checkpoint (ckpt-*.h5) of the job's model to score with; export: the checkpoint "
        "to export");
  t.add("data", &c.data,
        "predict: HDF5 file of images (N×C×H×W, the model's input; `labels` optional: then the "
        "accuracy is printed)");
  t.add("out", &c.out,
        "predict: HDF5 file to create with `predictions` (N int32) and `probabilities` (N×classes "
        "float32) in the input's order; export: the safetensors or ONNX file to create; refused "
        "if it exists");
  t.group("Named tensors (--init-from, dtrain export)", "tensors");
  t.add("init-from", &c.init_from,
        "train, predict: start from this safetensors file's tensors, by name (e.g. a torchvision "
        "state_dict saved with safetensors; strict: every tensor of the model and no other); a "
        "checkpoint to --resume from has priority");
  t.add("init-exclude", &c.init_exclude,
        "comma-separated tensor name prefixes --init-from leaves at the seed's initialisation "
        "(e.g. fc. for a new head)");
  t.add("format", &c.export_format,
        "export: output format: safetensors (the named tensors) | onnx (the inference graph, "
        "opset 17)");
  t.add("dtype", &c.export_dtype, "export --format safetensors: float tensors as f32 | bf16");
  t.group("Faults", "faults");
  t.add("timeout", &c.timeout, "seconds a rank may wait in one communication before aborting");
  t.add("skip-nonfinite", &c.skip_nonfinite, "skip steps with non-finite gradients (else stop)");
}

/// `dtrain plan`'s cluster, links and profile (plan/plan_command.hpp).
void add_plan_options(Table& t, Config& c) {
  t.group("Scaling plan (dtrain plan)", "plan");
  t.add("nodes", &c.nodes, "plan: nodes of the planned cluster");
  t.add("workers-per-node", &c.workers_per_node, "plan: worker ranks (GPUs or cores) per node");
  t.add("cores-per-node", &c.cores_per_node,
        "plan: CPU cores of a node (0: not priced): a step takes at least the node's CPU work "
        "(CPU workers' compute, shared-memory copies, ps updates) over its cores");
  t.add("straggler-cv", &c.straggler_cv,
        "plan: coefficient of variation of a worker's forward + backward from step to step "
        "(0: none): a sync step waits for the slowest of W such workers");
  t.add("network", &c.network,
        "plan: the link between nodes: 25gbe | hdr-ib | nvlink | shm, or "
        "alpha_us=A,beta_gbps=B[,shared=1] (latency µs, bandwidth Gb/s)");
  t.add("intra-node", &c.intra_node, "plan: the link inside a node, as --network (default shm)");
  t.add("profile", &c.profile,
        "plan: a worker profile saved by --save-profile, used instead of a profiling run");
  t.add("save-profile", &c.save_profile, "plan: write the measured worker profile (JSON) there");
  t.add("plan-steps", &c.plan_steps, "plan: timed steps of the profiling run (after a warm-up)");
}

void build_table(Table& t, Config& c) {
  add_data_options(t, c);
  add_training_options(t, c);
  add_optimizer_options(t, c);
  add_cluster_options(t, c);
  add_device_options(t, c);
  add_exchange_options(t, c);
  add_pipeline_options(t, c);
  add_output_options(t, c);
  add_plan_options(t, c);
}

/// Reads the job file, dropping "section." from keys. Unknown keys are errors naming the file.
po::parsed_options parse_job_file(const std::string& path, const po::options_description& desc) {
  namespace fs = std::filesystem;
  DT_REQUIRE(fs::exists(path), "job file '" + path + "' does not exist");
  DT_REQUIRE(fs::is_regular_file(path), "job file '" + path + "' is not a regular file");
  std::ifstream file(path, std::ios::binary);
  DT_REQUIRE(file.good(), "job file '" + path + "' cannot be read");
  std::stringstream in;
  in << file.rdbuf();
  // A UTF-8 byte-order mark (some Windows editors write one) is not part of the first line.
  if (in.str().rfind("\xEF\xBB\xBF", 0) == 0) in.seekg(3);
  po::parsed_options parsed(&desc);
  try {
    parsed = po::parse_config_file(in, desc, /*allow_unregistered=*/true);
  } catch (const po::error& e) {
    throw InputError("job file '" + path + "': " + e.what());
  }
  for (auto& o : parsed.options) {
    const std::string full = o.string_key;
    const auto dot = full.rfind('.');
    o.string_key = dot == std::string::npos ? full : full.substr(dot + 1);
    if (!desc.find_nothrow(o.string_key, false) || o.string_key == "config" ||
        o.string_key == "help")
      throw InputError("job file '" + path + "': unknown key '" + full +
                       "' (see dtrain --help for the valid keys)");
    o.unregistered = false;
  }
  return parsed;
}

/// The command line's options (argv without the subcommand) into vm. Throws InputError for an
/// unknown option, a bad value or a word that is no option's value.
void store_command_line(const std::vector<const char*>& args, const po::options_description& cli,
                        po::variables_map& vm) {
  try {
    const po::parsed_options parsed =
        po::command_line_parser(static_cast<int>(args.size()), args.data()).options(cli).run();
    // A word that is no option's value (a misspelt subcommand, a stray token) would be dropped.
    for (const po::option& o : parsed.options)
      if (o.position_key >= 0)
        throw InputError(
            "command line: unexpected argument '" +
            (o.value.empty() ? o.string_key : o.value.front()) +
            "' (usage: dtrain [train | predict | export | plan] --option value ...; see "
            "dtrain --help)");
    po::store(parsed, vm);
  } catch (const po::error& e) {
    throw InputError(std::string("command line: ") + e.what() + " (see dtrain --help)");
  }
}

/// The job file's options into vm, under the command line's: a key the command line gives keeps
/// its command-line value (po::store keeps the first), and a data source the command line names
/// replaces the job file's — --synthetic there drops the job file's --train-data and --test-data,
/// --train-data or --test-data there drops its --synthetic.
void store_job_file(const std::string& path, const po::options_description& desc,
                    po::variables_map& vm) {
  auto on_command_line = [&](const char* key) {
    return vm.count(key) && !vm[key].defaulted() && !vm[key].as<std::string>().empty();
  };
  std::vector<std::string> replaced;
  if (on_command_line("synthetic")) replaced = {"train-data", "test-data"};
  if (on_command_line("train-data") || on_command_line("test-data"))
    replaced.push_back("synthetic");
  try {
    po::parsed_options job = parse_job_file(path, desc);
    std::erase_if(job.options, [&](const po::option& o) {
      return std::find(replaced.begin(), replaced.end(), o.string_key) != replaced.end();
    });
    po::store(job, vm);
  } catch (const po::error& e) {
    throw InputError("job file '" + path + "': " + e.what());
  }
}

std::string help_text(const po::options_description& cli) {
  std::ostringstream os;
  os << "usage: mpirun -np N dtrain [train] --config JOB.ini [--option value ...]\n"
        "       mpirun -np N dtrain predict --config JOB.ini --checkpoint CKPT.h5 --data X.h5 "
        "--out P.h5\n"
        "       dtrain export --checkpoint CKPT.h5 --format safetensors --out M.safetensors "
        "[--dtype bf16]\n"
        "       dtrain export --checkpoint CKPT.h5 --format onnx --out M.onnx\n"
        "       dtrain plan --config JOB.ini --nodes N --workers-per-node G --network SPEC "
        "[--mode M --num-ps K]\n"
        "         (every rank scores a contiguous share of X with the checkpoint's parameters and "
        "the\n          batchnorm statistics evaluation used; no parameter servers)\n\n"
     << cli;
  return os.str();
}

}  // namespace

ParseResult parse_config(int argc, const char* const* argv) {
  ParseResult r;
  Config& c = r.config;
  Table table;
  build_table(table, c);
  po::options_description desc = table.all();
  po::options_description general("General");
  general.add_options()("help,h", "print this help and exit")(
      "version", "print dtrain's version (git describe at build time) and exit")(
      "config", po::value<std::string>(&c.config_file), "INI job file (see jobs/)");
  po::options_description cli;
  cli.add(general).add(desc);

  // The subcommand: `dtrain predict ...`, `dtrain train ...`, or `dtrain --option ...` (train).
  std::vector<const char*> args(argv, argv + argc);
  if (argc > 1 && find_enum(argv[1], c.command)) args.erase(args.begin() + 1);
  po::variables_map vm;
  store_command_line(args, cli, vm);
  if (vm.count("help") || vm.count("version")) {
    r.help = true;
    r.help_text =
        vm.count("help") ? help_text(cli) : std::string("dtrain ") + dtrain_version() + "\n";
    return r;
  }
  c.plan_mode_given = vm.count("mode") && !vm["mode"].defaulted();
  c.plan_num_ps_given = vm.count("num-ps") && !vm["num-ps"].defaulted();
  if (vm.count("config")) store_job_file(vm["config"].as<std::string>(), desc, vm);
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    throw InputError(std::string("options: ") + e.what());
  }
  validate_config(c);
  c.effective_ini = "# effective dtrain configuration\n" + table.effective_ini();
  return r;
}

Config effective_for_workers(const Config& c, int workers) {
  Config e = c;
  if (steps_aggregate_workers(c) && c.lr_scaling == LrScaling::linear) {
    e.lr *= static_cast<float>(workers);
    e.lr_min *= static_cast<float>(workers);
  }
  if (exchange_kind(c) == ExchangeKind::ps_async && c.async_schedule == AsyncSchedule::sync_steps) {
    e.warmup_steps *= workers;
    e.lr_step_size *= workers;
    e.lr_decay_steps *= workers;
  }
  return e;
}

StepRange parse_step_range(const std::string& spec) {
  if (spec.empty()) return {};
  StepRange r;
  const char* p = spec.data();
  const char* end = p + spec.size();
  const auto [mid, e1] = std::from_chars(p, end, r.begin);
  const bool ok = e1 == std::errc() && mid != p && mid != end && *mid == ':';
  const auto [last, e2] = ok ? std::from_chars(mid + 1, end, r.end)
                             : std::from_chars_result{mid, std::errc::invalid_argument};
  if (!ok || e2 != std::errc() || last != end || last == mid + 1 || r.begin < 0 || r.end <= r.begin)
    throw InputError("option --profile-steps '" + spec +
                     "': expected A:B, global steps with 0 <= A < B (e.g. 50:60)");
  return r;
}

namespace {

/// A decimal number or a fraction A/B; nullopt when `text` is neither.
std::optional<double> parse_fraction(std::string_view text) {
  const char* p = text.data();
  const char* end = p + text.size();
  double num = 0, den = 1;
  auto [q, e1] = std::from_chars(p, end, num);
  if (e1 != std::errc() || q == p) return std::nullopt;
  if (q != end && *q == '/') {
    const char* d = q + 1;
    auto [r, e2] = std::from_chars(d, end, den);
    if (e2 != std::errc() || r == d) return std::nullopt;
    q = r;
  }
  if (q != end || den == 0) return std::nullopt;
  return num / den;
}

}  // namespace

std::pair<double, double> parse_min_max(const std::string& opt, const std::string& spec) {
  const std::size_t comma = spec.find(',');
  std::optional<double> lo, hi;
  if (comma != std::string::npos) {
    lo = parse_fraction(std::string_view(spec).substr(0, comma));
    hi = parse_fraction(std::string_view(spec).substr(comma + 1));
  }
  if (!lo || !hi || !std::isfinite(*lo) || !std::isfinite(*hi) || !(*lo > 0) || *lo > *hi)
    throw InputError("option --" + opt + " '" + spec +
                     "': expected MIN,MAX, two numbers or fractions A/B with 0 < MIN <= MAX "
                     "(e.g. 0.35,1 or 3/4,4/3)");
  return {*lo, *hi};
}

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

/// The data files or --synthetic, and --synthetic-samples.
void check_data_source(const Config& c) {
  if (!c.synthetic.empty()) {
    (void)parse_synthetic_spec(c.synthetic);  // InputError naming --synthetic
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
  if (c.command == Subcommand::predict) {
    DT_REQUIRE(c.checkpoint.empty() != c.init_from.empty(),
               "dtrain predict: give exactly one of --checkpoint and --init-from");
    DT_REQUIRE(!c.data.empty(), "dtrain predict: option --data is required");
    DT_REQUIRE(!c.out.empty(), "dtrain predict: option --out is required");
  }
  DT_REQUIRE(c.init_exclude.empty() || !c.init_from.empty(),
             "option --init-exclude: only with --init-from");
  if (c.command == Subcommand::export_tensors) {
    DT_REQUIRE(!c.checkpoint.empty(), "dtrain export: option --checkpoint is required");
    DT_REQUIRE(!c.out.empty(), "dtrain export: option --out is required");
    DT_REQUIRE(c.export_format == ExportFormat::safetensors || c.export_dtype == ExportDtype::f32,
               "option --dtype: " + std::string(to_string(c.export_dtype)) +
                   " applies to --format safetensors; an ONNX export holds float32 tensors");
  }
}

/// Augmentation, decoding and the model.
void check_input_and_model(const Config& c) {
  non_negative("num-classes", c.num_classes);
  non_negative("random-crop", c.random_crop);
  non_negative("random-resized-crop", c.random_resized_crop);
  const auto scale = parse_min_max("rrc-scale", c.rrc_scale);
  const auto ratio = parse_min_max("rrc-ratio", c.rrc_ratio);
  DT_REQUIRE(scale.second <= 1, "option --rrc-scale '" + c.rrc_scale +
                                    "': MAX is a fraction of the image's area, expected <= 1");
  DT_REQUIRE(c.random_resized_crop > 0 ||
                 (scale == std::pair{0.08, 1.0} && ratio == std::pair{3.0 / 4.0, 4.0 / 3.0}),
             "options --rrc-scale / --rrc-ratio: set the ranges of --random-resized-crop, which "
             "is off (0)");
  non_negative("center-crop", c.center_crop);
  non_negative("eval-resize", c.eval_resize);
  positive("data-threads", c.data_threads);
  non_negative("cache-mb", c.cache_mb);
  DT_REQUIRE(
      c.synthetic.empty() || c.num_classes == 0,
      "option --num-classes: not used with --synthetic (its CxHxW:classes sets the classes)");
  DT_REQUIRE(!c.layers.empty(), "option --layer: the model has no layers (give `layer =` lines)");
  (void)parse_step_range(c.profile_steps);  // InputError naming --profile-steps
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
  // Boost reads "-1" into the unsigned seed as 2^64 − 1: refuse what only a negative number gives.
  DT_REQUIRE(c.seed <= static_cast<std::uint64_t>(INT64_MAX),
             "option --seed: must be an integer from 0 to 9223372036854775807, got " +
                 std::to_string(c.seed) + " (a negative number?)");
  positive("epochs", c.epochs);
  positive("batch-size", c.batch_size);
  positive("pipeline-stages", c.pipeline_stages);
  positive("micro-batches", c.micro_batches);
  DT_REQUIRE(c.batch_size % c.micro_batches == 0,
             "option --micro-batches: " + std::to_string(c.micro_batches) +
                 " does not divide --batch-size " + std::to_string(c.batch_size) +
                 " (every micro-batch has the same number of samples)");
  non_negative("global-batch-size", c.global_batch_size);
  non_negative("max-steps", static_cast<double>(c.max_steps));
  positive("log-every", c.log_every);
  non_negative("eval-every", static_cast<double>(c.eval_every));
  DT_REQUIRE(c.target_accuracy >= 0 && c.target_accuracy <= 1,
             "option --target-accuracy: must be in [0, 1] (0: off), got " +
                 to_text(c.target_accuracy));
}

/// The optimizer, weight decay and the learning-rate schedule.
void check_optimizer(const Config& c) {
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
  DT_REQUIRE((c.lr_schedule != LrSchedule::cosine && c.lr_schedule != LrSchedule::poly) ||
                 c.lr_min <= c.lr,
             "option --lr-min: the " + std::string(to_string(c.lr_schedule)) +
                 " schedule decays from --lr (" + to_text(c.lr) +
                 ") down to --lr-min, which must not exceed it; got " + to_text(c.lr_min));
  positive("lr-power", c.lr_power);
  positive("lars-eta", c.lars_eta);
  non_negative("lars-eps", c.lars_epsilon);
  DT_REQUIRE(c.beta1 >= 0 && c.beta1 < 1, "option --beta1: must be in [0, 1)");
  DT_REQUIRE(c.beta2 >= 0 && c.beta2 < 1, "option --beta2: must be in [0, 1)");
  positive("adam-epsilon", c.adam_epsilon);
}

/// Sizes and deadlines of the cluster, its output and its communication.
void check_cluster_sizes(const Config& c) {
  non_negative("num-ps", c.num_ps);
  non_negative("threads", c.threads);
  non_negative("ps-threads", c.ps_threads);
  DT_REQUIRE(c.ps_chunk_kb >= 1 && c.ps_chunk_kb <= 1024 * 1024,
             "option --ps-chunk-kb: must be a size in KiB from 1 to 1048576, got " +
                 std::to_string(c.ps_chunk_kb));
  non_negative("checkpoint-every", static_cast<double>(c.checkpoint_every));
  positive("keep-checkpoints", c.keep_checkpoints);
  non_negative("summary-every", static_cast<double>(c.summary_every));
  positive("timeout", c.timeout);
  DT_REQUIRE(c.conv_workspace_mb >= 0 && c.conv_workspace_mb <= 1 << 20,
             "option --conv-workspace-mb: must be in [0, 1048576] MiB, got " +
                 std::to_string(c.conv_workspace_mb));
  DT_REQUIRE(c.bucket_mb >= 0 && c.bucket_mb <= 2047,
             "option --bucket-mb: must be a size in MiB from 0 to 2047 (0: one bucket), got " +
                 to_text(c.bucket_mb));
  DT_REQUIRE(!c.run_dir.empty(), "option --run-dir: must not be empty");
}

/// The options of one mode (async staleness and delay compensation, sync backup workers).
void check_mode(const Config& c) {
  DT_REQUIRE(!(c.mode == Mode::async && c.num_ps == 0),
             "option --num-ps: async mode needs at least one parameter server (got 0); use "
             "--mode sync for allreduce without ps");
  DT_REQUIRE(c.max_staleness >= -1,
             "option --max-staleness: must be >= 0, or -1 for unbounded; got " +
                 std::to_string(c.max_staleness));
  DT_REQUIRE(c.max_staleness < 0 || c.mode == Mode::async,
             "option --max-staleness: bounds async training (--mode async); sync mode is bulk "
             "synchronous already");
  DT_REQUIRE(std::isfinite(c.delay_compensation) && c.delay_compensation >= 0.0f,
             "option --delay-compensation: must be a number >= 0 (0: off), got " +
                 to_text(c.delay_compensation));
  DT_REQUIRE(c.delay_compensation == 0.0f || (c.mode == Mode::async && c.max_staleness < 0),
             "option --delay-compensation: corrects stale pushes of async training (--mode async "
             "without --max-staleness)");
  non_negative("replicas-to-aggregate", c.replicas_to_aggregate);
  DT_REQUIRE(c.replicas_to_aggregate == 0 || (c.mode == Mode::sync && c.num_ps > 0),
             "option --replicas-to-aggregate: applies to sync training through parameter servers "
             "(--mode sync --num-ps K > 0)");
}

}  // namespace

void validate_config(const Config& c) {
  check_data_source(c);
  check_subcommand(c);
  if (c.command == Subcommand::export_tensors) return;  // the model and data: the checkpoint's
  check_input_and_model(c);
  check_exchange_path(c);
  check_cuda_graph(c);
  check_steps_and_batches(c);
  check_optimizer(c);
  check_cluster_sizes(c);
  check_mode(c);
}

ExchangeKind exchange_kind(const Config& c) {
  if (c.mode == Mode::sync) return c.num_ps > 0 ? ExchangeKind::ps_sync : ExchangeKind::allreduce;
  return c.max_staleness >= 0 ? ExchangeKind::ps_bounded : ExchangeKind::ps_async;
}

std::string cuda_graph_off_reason(const Config& c, int workers) {
  if (c.cuda_graph == CudaGraphOption::off) return "--cuda-graph off";
  if (c.micro_batches > 1)
    return "--micro-batches " + std::to_string(c.micro_batches) + " (a step of several passes)";
  if (c.pipeline_stages > 1) return "--pipeline-stages " + std::to_string(c.pipeline_stages);
  if (c.debug_sync) return "--debug-sync (the host waits for the device after every layer)";
  const bool nccl = c.allreduce == AllreduceOption::nccl ||
                    (c.allreduce == AllreduceOption::automatic && !c.allow_gpu_sharing);
  if (workers > 1 && exchange_kind(c) == ExchangeKind::allreduce && nccl && c.overlap)
    return "NCCL sums gradient buckets while backward runs (--overlap true, " +
           std::to_string(workers) + " workers)";
  return "";
}

bool steps_aggregate_workers(const Config& c) { return exchange_kind(c) != ExchangeKind::ps_async; }

}  // namespace dtrain
