// dtrain/core/options.hpp — the enum-valued options (--mode, --optimizer, --device, ...): one enum
// each, and one {value, name} table per enum that serves parsing (the command line, job files and
// parse_enum), printing (to_string, operator<<: logs, the effective configuration, results.json)
// and the list of choices in errors. The names are the options' spelling ("auto", "1f1b", ...).
// The enums the compute modules share (Precision, OptimizerKind, PipelineSchedule, WireDtype)
// are defined here, on the ground floor, so that Config holds them without including those modules.
#pragma once

#include <array>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>

namespace dtrain {

/// --mode: how the workers' gradients become parameters.
enum class Mode {
  async,  ///< through parameter servers, each push applied on arrival (Downpour SGD)
  sync,  ///< one update per global step from every worker's gradient (allreduce, or through the ps)
};

/// The gradient exchange a run uses, from --mode, --num-ps and --max-staleness: one
/// GradientExchange class each (train/exchange.hpp), and the only thing the training loop asks.
enum class ExchangeKind {
  allreduce,   ///< --mode sync --num-ps 0: allreduce, every worker applies the same step
  ps_sync,     ///< --mode sync --num-ps K: the ps aggregates --replicas-to-aggregate gradients per
               ///< step (TensorFlow's SyncReplicasOptimizer; workers beyond R are backups)
  ps_async,    ///< --mode async: every push applied on arrival (Downpour SGD)
  ps_bounded,  ///< --mode async --max-staleness S: stale synchronous parallel (Ho et al. 2013)
};

/// --stale-lr: the learning rate an async ps applies to a push of staleness τ.
enum class StaleLr {
  constant,  ///< lr, whatever τ (Downpour SGD)
  inverse,   ///< lr / max(1, τ) (Zhang et al. 2016, "Staleness-aware async-SGD")
};

/// --async-momentum: the momentum an async ps applies.
enum class AsyncMomentum {
  lr_scaled,  ///< --momentum minus (1 − 1/W)·lr(step)/lr: the implicit momentum is compensated
              ///< in proportion to the learning rate (the staleness error θ_t − θ_{t−τ} scales
              ///< with it), full compensation at the peak rate, none as it decays to 0
  compensated,  ///< --momentum minus the implicit momentum of W asynchronous workers, 1 − 1/W
                ///< (Mitliagkas et al. 2016, "Asynchrony begets momentum"), at least 0
  as_given,     ///< --momentum unchanged
  dana,         ///< --momentum per worker, and each worker computes at the look-ahead position
                ///< (DANA, Hakimi et al. 2019; optim/dana.hpp); the momentum optimizer only
                ///< (sgd and adam: as given). The default.
};

/// --async-schedule: what the schedule's step counts (--warmup-steps, --lr-step-size,
/// --lr-decay-steps) count in async mode, where a global step is one worker's push.
enum class AsyncSchedule {
  sync_steps,  ///< global steps of a sync run of the same workers (W pushes each), so that async
               ///< follows the same schedule per sample as sync
  pushes,      ///< pushes (async global steps)
};

/// The subcommand: `dtrain [train]`, `dtrain predict`, `dtrain export`, `dtrain plan`.
enum class Subcommand { train, predict, export_tensors, plan };

/// --on-bad-image: what a corrupt or truncated encoded image does.
enum class OnBadImage {
  skip,  ///< left out of its batch and counted (log, results.json)
  fail,  ///< the run stops naming the file and sample
};

/// --optimizer: the update rule: SGD, SGD with momentum (optionally Nesterov), or Adam.
enum class OptimizerKind { sgd, momentum, adam, lars, lamb };

/// --lr-schedule: the learning rate after warm-up (optim/optimizer.hpp learning_rate).
enum class LrSchedule { constant, step, cosine, poly };

/// --lr-scaling: none | linear (sync mode multiplies --lr by the workers, Goyal et al. 2017).
enum class LrScaling { none, linear };

/// --device: where the workers compute; automatic ("auto"): a GPU when the rank has one.
enum class DeviceOption { cpu, cuda, automatic };

/// --math: GPU convolution and matrix-product math (dnn/backend.hpp MathMode); automatic ("auto"):
/// tf32 on compute capability ≥ 8.0.
enum class MathOption { automatic, tf32, fp32 };

/// --layout: the activations' memory order (dnn/backend.hpp Layout); automatic ("auto"): see
/// train/trainer.hpp layout_of.
enum class LayoutOption { automatic, nchw, nhwc };

/// Precision of the activations (--precision): fp32, or bf16 mixed precision (dnn/backend.hpp
/// describes what is stored and computed in which type).
enum class Precision { fp32, bf16 };

/// --fuse: layer fusion on (automatic, "auto": see Backend::set_fuse) or off.
enum class FuseOption { automatic, off };

/// --cuda-graph: the GPU training step captured once per batch shape and replayed as one CUDA
/// graph (model/step_graphs.hpp): automatic ("auto": where the step is capturable, falling back to
/// eager launches on a capture error), on (a capture error is an error), off.
enum class CudaGraphOption { automatic, on, off };

/// --conv-api: how GPU convolutions call cuDNN (dnn/cuda/conv_op.cpp): legacy (cudnnConvolution*
/// with the algorithm enums of cudnn_cnn.h) or graph (each direction a one-operation graph of
/// cuDNN's graph API, its engine from cuDNN's heuristics: dnn/cuda/conv_graph.hpp).
enum class ConvApi { legacy, graph };

/// --schedule: the pipeline schedule (model/pipeline_plan.hpp): GPipe (Huang et al. 2019) or
/// 1F1B (Narayanan et al. 2021, PipeDream-Flush).
enum class PipelineSchedule { gpipe, one_f_one_b };

/// --allreduce: the sync allreduce's path (train/allreduce_exchange.cpp); automatic ("auto"):
/// nccl on GPUs, hierarchical on CPUs (mpi where that cannot be). none: a benchmark, not
/// training — no sum, every worker applies its own gradient and the workers only agree on
/// stopping at every step (one float): lock-step compute without the exchange, as
/// tf_cnn_benchmarks' --variable_update=independent.
enum class AllreduceOption { automatic, mpi, hierarchical, nccl, none };

/// --wire-dtype: what gradients travel between ranks as (the MPI allreduce, collectives/wire.hpp;
/// the hierarchical one's shared memory and leaders' hop, collectives/hierarchical.hpp; ps pushes,
/// ps/client.hpp): fp32 as they are, or rounded once to bf16 or IEEE fp16 and summed or applied
/// in fp32 at the receiver (dnn/float16.hpp).
enum class WireDtype { fp32, bf16, fp16 };

/// --num-ps: parameter-server ranks, a count K ≥ 0 or "auto" (train/ps_count.hpp picks K from the
/// model, the batch and the world size before the world is split). It reads as its count, so that
/// `c.num_ps > 0` asks for a ps mode; "auto" holds the count 1 (a ps mode) until the trainer
/// resolves it (Job::num_ps).
struct PsCount {
  int count = 1;
  bool automatic = false;
  constexpr PsCount(int k = 1) : count(k) {}        // NOLINT(google-explicit-constructor): a count
  constexpr operator int() const { return count; }  // NOLINT(google-explicit-constructor)
  /// "auto".
  [[nodiscard]] static constexpr PsCount chosen_by_rule() {
    PsCount p;
    p.automatic = true;
    return p;
  }
};
inline std::ostream& operator<<(std::ostream& os, const PsCount& p) {
  return p.automatic ? os << "auto" : os << p.count;
}

/// export --format: the file format `dtrain export` writes.
enum class ExportFormat { safetensors, onnx };

/// export --dtype: the element type of exported float tensors.
enum class ExportDtype { f32, bf16 };

/// {value, name} of every value of an option enum, in the order --help and errors list them.
template <typename E>
struct EnumNames;
template <typename E>
concept NamedEnum = requires {
  EnumNames<E>::table;
};

#define DTRAIN_ENUM_NAMES(E, N, ...)                                                \
  template <>                                                                       \
  struct EnumNames<E> {                                                             \
    static constexpr std::array<std::pair<E, const char*>, N> table{{__VA_ARGS__}}; \
  }
DTRAIN_ENUM_NAMES(Mode, 2, {Mode::async, "async"}, {Mode::sync, "sync"});
DTRAIN_ENUM_NAMES(ExchangeKind, 4, {ExchangeKind::allreduce, "allreduce"},
                  {ExchangeKind::ps_sync, "sync through the ps"}, {ExchangeKind::ps_async, "async"},
                  {ExchangeKind::ps_bounded, "bounded-staleness async"});
DTRAIN_ENUM_NAMES(StaleLr, 2, {StaleLr::constant, "constant"}, {StaleLr::inverse, "inverse"});
DTRAIN_ENUM_NAMES(AsyncMomentum, 4, {AsyncMomentum::lr_scaled, "lr-scaled"},
                  {AsyncMomentum::compensated, "compensated"},
                  {AsyncMomentum::as_given, "as-given"}, {AsyncMomentum::dana, "dana"});
DTRAIN_ENUM_NAMES(AsyncSchedule, 2, {AsyncSchedule::sync_steps, "sync-steps"},
                  {AsyncSchedule::pushes, "pushes"});
DTRAIN_ENUM_NAMES(Subcommand, 4, {Subcommand::train, "train"}, {Subcommand::predict, "predict"},
                  {Subcommand::export_tensors, "export"}, {Subcommand::plan, "plan"});
DTRAIN_ENUM_NAMES(OnBadImage, 2, {OnBadImage::skip, "skip"}, {OnBadImage::fail, "fail"});
DTRAIN_ENUM_NAMES(OptimizerKind, 5, {OptimizerKind::sgd, "sgd"},
                  {OptimizerKind::momentum, "momentum"}, {OptimizerKind::adam, "adam"},
                  {OptimizerKind::lars, "lars"}, {OptimizerKind::lamb, "lamb"});
DTRAIN_ENUM_NAMES(LrSchedule, 4, {LrSchedule::constant, "constant"}, {LrSchedule::step, "step"},
                  {LrSchedule::cosine, "cosine"}, {LrSchedule::poly, "poly"});
DTRAIN_ENUM_NAMES(LrScaling, 2, {LrScaling::none, "none"}, {LrScaling::linear, "linear"});
DTRAIN_ENUM_NAMES(DeviceOption, 3, {DeviceOption::cpu, "cpu"}, {DeviceOption::cuda, "cuda"},
                  {DeviceOption::automatic, "auto"});
DTRAIN_ENUM_NAMES(MathOption, 3, {MathOption::automatic, "auto"}, {MathOption::tf32, "tf32"},
                  {MathOption::fp32, "fp32"});
DTRAIN_ENUM_NAMES(LayoutOption, 3, {LayoutOption::automatic, "auto"}, {LayoutOption::nchw, "nchw"},
                  {LayoutOption::nhwc, "nhwc"});
DTRAIN_ENUM_NAMES(Precision, 2, {Precision::fp32, "fp32"}, {Precision::bf16, "bf16"});
DTRAIN_ENUM_NAMES(FuseOption, 2, {FuseOption::automatic, "auto"}, {FuseOption::off, "off"});
DTRAIN_ENUM_NAMES(CudaGraphOption, 3, {CudaGraphOption::automatic, "auto"},
                  {CudaGraphOption::on, "on"}, {CudaGraphOption::off, "off"});
DTRAIN_ENUM_NAMES(ConvApi, 2, {ConvApi::legacy, "legacy"}, {ConvApi::graph, "graph"});
DTRAIN_ENUM_NAMES(PipelineSchedule, 2, {PipelineSchedule::gpipe, "gpipe"},
                  {PipelineSchedule::one_f_one_b, "1f1b"});
DTRAIN_ENUM_NAMES(AllreduceOption, 5, {AllreduceOption::automatic, "auto"},
                  {AllreduceOption::mpi, "mpi"}, {AllreduceOption::hierarchical, "hierarchical"},
                  {AllreduceOption::nccl, "nccl"}, {AllreduceOption::none, "none"});
DTRAIN_ENUM_NAMES(WireDtype, 3, {WireDtype::fp32, "fp32"}, {WireDtype::bf16, "bf16"},
                  {WireDtype::fp16, "fp16"});
DTRAIN_ENUM_NAMES(ExportFormat, 2, {ExportFormat::safetensors, "safetensors"},
                  {ExportFormat::onnx, "onnx"});
DTRAIN_ENUM_NAMES(ExportDtype, 2, {ExportDtype::f32, "f32"}, {ExportDtype::bf16, "bf16"});
#undef DTRAIN_ENUM_NAMES

/// The name of an enum value, a NUL-terminated literal ("?" for a value outside the table).
template <NamedEnum E>
[[nodiscard]] constexpr const char* to_string(E e) {
  for (const auto& [v, name] : EnumNames<E>::table)
    if (v == e) return name;
  return "?";
}
template <NamedEnum E>
std::ostream& operator<<(std::ostream& os, E e) {
  return os << to_string(e);
}

/// The valid names of E, as errors list them: "a | b | c".
template <NamedEnum E>
[[nodiscard]] std::string enum_choices() {
  std::string list;
  for (const auto& [value, name] : EnumNames<E>::table)
    list += (list.empty() ? "" : " | ") + std::string(name);
  return list;
}

/// The value named `text`, or false when no value has that name.
template <NamedEnum E>
[[nodiscard]] constexpr bool find_enum(std::string_view text, E& out) {
  for (const auto& [value, name] : EnumNames<E>::table) {
    if (std::string_view(name) == text) {
      out = value;
      return true;
    }
  }
  return false;
}

/// Throws InputError "option --OPTION: invalid value 'TEXT' (expected a | b)", the message the
/// option table gives a bad enum value (core/config_options.cpp).
[[noreturn]] void throw_invalid_choice(std::string_view option, std::string_view text,
                                       const std::string& choices);

/// The value of E named `text`; throws InputError naming `option` (without its dashes) and the
/// choices otherwise: parse_enum<Precision>("bf16", "precision") is Precision::bf16.
template <NamedEnum E>
[[nodiscard]] E parse_enum(std::string_view text, std::string_view option) {
  E out{};
  if (!find_enum(text, out)) throw_invalid_choice(option, text, enum_choices<E>());
  return out;
}

}  // namespace dtrain
