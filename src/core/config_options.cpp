// src/core/config_options.cpp — every option of dtrain: name, field of Config, default and --help
// text, in --help order and grouped as the job file's sections; and the Boost.Program_options
// hooks that read the option enums and --num-ps.
#include <boost/program_options.hpp>
#include <charconv>
#include <string>
#include <vector>

#include "config_table.hpp"
#include "dtrain/core/config.hpp"

namespace dtrain {

namespace po = boost::program_options;

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

namespace config_detail {

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
        "encoded images: decode threads per worker (one is the prefetch thread itself; 0: a GPU "
        "worker's share of its node's cores less the thread driving the GPU, at least 1; a CPU "
        "worker 1, its cores compute)");
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
  t.add("log-every", &c.log_every,
        "chief log line (and metrics.csv row) every N of the chief's steps of an epoch, counted "
        "from its start (a resumed run logs at the same steps); async: the chief's own pushes, "
        "about W x N global steps");
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
        "parameters without weight decay, comma-separated: bias (the conv and dense layers' "
        "biases), bn (batchnorm gamma and beta, though beta is named *.bias in exports), e.g. "
        "bias,bn (empty: decay all)");
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
        "none | linear: the aggregating modes (sync, SSP) multiply --lr and --lr-min by the "
        "gradients a global step averages: the workers, or --replicas-to-aggregate (linear "
        "scaling rule, Goyal et al. 2017)");
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
        "gradients between ranks as fp32 | bf16 | fp16 (half the bytes; summed or applied in "
        "fp32 at the receiver): the allreduce (each gradient rounded once and the sum, which "
        "travels back in 16 bits, once more; hierarchical: the node's shared memory and the "
        "leaders' hop, each sum rounded once) and ps pushes (each push rounded once; pulls stay "
        "fp32; a --ps-shm ring holds the rounded values in 32 bits)");
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
  t.add("threads", &c.threads,
        "OpenMP threads per rank (0: the CPUs the node's ranks may use / ranks per node)");
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
  t.add("checkpoint-secs", &c.checkpoint_secs,
        "also checkpoint at the first step ending S seconds or more after the last checkpoint was "
        "written (TensorFlow's save_checkpoint_secs; the chief's wall clock; 0: off). Lockstep "
        "modes agree on the step with one 4-byte broadcast per step");
  t.add("keep-checkpoints", &c.keep_checkpoints, "how many newest checkpoints to keep");
  t.add("resume", &c.resume, "continue from the newest valid checkpoint in --run-dir");
  t.add("timeline", &c.timeline,
        "write <run-dir>/timeline.json: every rank's spans (data wait, forward, backward, "
        "allreduce / push-pull, optimizer, evaluation, checkpoint) as a Chrome trace for "
        "chrome://tracing or Perfetto (a resumed run keeps it and writes timeline-2.json, and so "
        "on)");
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
        "float32) in the input's order; export: the safetensors or ONNX file to create; plan: "
        "the plan as JSON; refused if it exists");
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
  t.add("timeout", &c.timeout,
        "seconds a rank may wait in one communication before aborting (at most 30 days)");
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
        "plan: a worker profile saved by --save-profile, used instead of a profiling run (of "
        "this job's layers; their parameter counts are checked where the job's input is here)");
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

}  // namespace config_detail
}  // namespace dtrain
