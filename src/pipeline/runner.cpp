// src/pipeline/runner.cpp — a pipeline stage's micro-batches and its point-to-point traffic
// (see pipeline/runner.hpp).
#include "dtrain/pipeline/runner.hpp"

#include <algorithm>
#include <climits>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/core/timeline.hpp"

namespace dtrain {

/// One activation slot's traffic: the sends in flight from it and, on a GPU, the host buffers
/// its messages are staged in.
struct PipelineRunner::Slot {
  std::vector<MPI_Request> sends;
  std::vector<std::byte> host_in, host_out;  // staging (GPU only)
};

PipelineRunner::PipelineRunner(Model& stage, MPI_Comm pipe, PipelineSchedule schedule,
                               int micro_batches)
    : model_(stage), schedule_(schedule), micro_batches_(micro_batches) {
  DT_CHECK_MPI(MPI_Comm_dup(pipe, &pipe_));
  DT_CHECK_MPI(MPI_Comm_rank(pipe_, &stage_));
  DT_CHECK_MPI(MPI_Comm_size(pipe_, &stages_));
  int me = 0;
  DT_CHECK_MPI(MPI_Comm_rank(MPI_COMM_WORLD, &me));
  world_rank_of_.resize(static_cast<std::size_t>(stages_));
  DT_CHECK_MPI(MPI_Allgather(&me, 1, MPI_INT, world_rank_of_.data(), 1, MPI_INT, pipe_));
  const int need = stage_slots(schedule, stage_, stages_, micro_batches);
  DT_REQUIRE(stage.slots() >= need,
             "pipeline: stage " + std::to_string(stage_) + " has " + std::to_string(stage.slots()) +
                 " activation slots but " + to_string(schedule) + " with " +
                 std::to_string(micro_batches) + " micro-batches needs " + std::to_string(need));
  slots_.resize(static_cast<std::size_t>(stage.slots()));
}

PipelineRunner::~PipelineRunner() {
  for (auto& s : slots_)
    for (auto& r : s.sends)
      if (r != MPI_REQUEST_NULL) MPI_Request_free(&r);  // unwinding from an error
  if (pipe_ != MPI_COMM_NULL) MPI_Comm_free(&pipe_);
}

std::string PipelineRunner::peer_name(int stage) const {
  return "stage " + std::to_string(stage) + " (world rank " +
         std::to_string(world_rank_of_.at(static_cast<std::size_t>(stage))) + ")";
}

namespace {
/// What crosses the cut between this stage and a neighbour: the received tensors toward the
/// stage before, the sent ones toward the next.
const std::vector<int>& crossing(const Model& m, bool toward_previous) {
  return toward_previous ? m.received_tensors() : m.sent_tensors();
}

int message_bytes(const Model& m, int t, int rows) {
  const std::size_t bytes = m.tensor_elements(t, rows) * m.backend().act_size();
  DT_REQUIRE(bytes <= static_cast<std::size_t>(INT_MAX),
             "pipeline: tensor " + std::to_string(t) + " of a micro-batch is " +
                 std::to_string(bytes) +
                 " bytes, more than one MPI message carries; use more "
                 "--micro-batches");
  return static_cast<int>(bytes);
}
}  // namespace

void PipelineRunner::receive(int slot, int m, int rows, bool grad) {
  // Activations come from the stage before into the received tensors; gradients from the stage
  // after into the sent tensors' gradients.
  const bool from_previous = !grad;
  const int peer = from_previous ? stage_ - 1 : stage_ + 1;
  const std::vector<int>& ts = crossing(model_, from_previous);
  const bool staged = model_.backend().device() != Device::cpu;
  Slot& sl = slots_[static_cast<std::size_t>(slot)];
  std::vector<MPI_Request> reqs;
  std::size_t at = 0;
  for (int t : ts) {
    const int bytes = message_bytes(model_, t, rows);
    void* dev = grad ? model_.tensor_grad(slot, t) : model_.tensor_value(slot, t);
    if (staged) sl.host_in.resize(std::max(sl.host_in.size(), at + bytes));
    reqs.emplace_back();
    DT_CHECK_MPI(MPI_Irecv(staged ? sl.host_in.data() + at : dev, bytes, MPI_BYTE, peer,
                           2 * m + (grad ? 1 : 0), pipe_, &reqs.back()));
    at += static_cast<std::size_t>(bytes);
  }
  {
    const TimelineSpan span("pipeline-wait", "comm");
    const double t0 = now_seconds();
    wait_all(reqs, comm_timeout(),
             "pipeline: stage " + std::to_string(stage_) + " waiting for the " +
                 (grad ? "gradients" : "activations") + " of micro-batch " + std::to_string(m) +
                 " from " + peer_name(peer));
    times_.wait += now_seconds() - t0;
  }
  if (!staged) return;
  at = 0;
  for (int t : ts) {
    const int bytes = message_bytes(model_, t, rows);
    model_.backend().copy_to_device(grad ? model_.tensor_grad(slot, t)
                                         : model_.tensor_value(slot, t),
                                    sl.host_in.data() + at, static_cast<std::size_t>(bytes));
    at += static_cast<std::size_t>(bytes);
  }
}

void PipelineRunner::send(int slot, int m, int rows, bool grad) {
  // Activations go to the next stage from the sent tensors; gradients to the stage before from
  // the received tensors' gradients.
  const bool to_previous = grad;
  const int peer = to_previous ? stage_ - 1 : stage_ + 1;
  const std::vector<int>& ts = crossing(model_, to_previous);
  const bool staged = model_.backend().device() != Device::cpu;
  Slot& sl = slots_[static_cast<std::size_t>(slot)];
  std::size_t at = 0;
  for (int t : ts) {
    const int bytes = message_bytes(model_, t, rows);
    void* dev = grad ? model_.tensor_grad(slot, t) : model_.tensor_value(slot, t);
    const void* src = dev;
    if (staged) {
      sl.host_out.resize(std::max(sl.host_out.size(), at + bytes));
      model_.backend().copy_to_host(sl.host_out.data() + at, dev, static_cast<std::size_t>(bytes));
      src = sl.host_out.data() + at;
    }
    sl.sends.emplace_back();
    DT_CHECK_MPI(
        MPI_Isend(src, bytes, MPI_BYTE, peer, 2 * m + (grad ? 1 : 0), pipe_, &sl.sends.back()));
    at += static_cast<std::size_t>(bytes);
  }
}

void PipelineRunner::wait_sends(int slot) {
  Slot& sl = slots_[static_cast<std::size_t>(slot)];
  if (sl.sends.empty()) return;
  const TimelineSpan span("pipeline-wait", "comm");
  const double t0 = now_seconds();
  // The slot's messages went to the stage before (gradients) or after (activations), or both.
  std::string peers;
  for (const int p : {stage_ - 1, stage_ + 1})
    if (p >= 0 && p < stages_) peers += (peers.empty() ? "" : " or ") + peer_name(p);
  wait_all(sl.sends, comm_timeout(),
           "pipeline: stage " + std::to_string(stage_) + " sending to " + peers);
  sl.sends.clear();
  times_.wait += now_seconds() - t0;
}

void PipelineRunner::wait_all_sends() {
  for (int k = 0; k < static_cast<int>(slots_.size()); ++k) wait_sends(k);
}

void PipelineRunner::train_step(const void* x, const std::int32_t* labels, int n, float grad_scale,
                                std::uint64_t step_seed, float* stats, const GradsFinal& on_final) {
  times_ = {};
  const int M = std::max(1, std::min(micro_batches_, n));
  const bool first = stage_ == 0, last = stage_ + 1 == stages_;
  for (const PipelineOp& op : stage_schedule(schedule_, stage_, stages_, M)) {
    const int a = static_cast<int>(static_cast<std::int64_t>(n) * op.micro / M);
    const int rows = static_cast<int>(static_cast<std::int64_t>(n) * (op.micro + 1) / M) - a;
    wait_sends(op.slot);  // the slot's arena is written again below
    if (op.forward) {
      if (!first) receive(op.slot, op.micro, rows, false);
      const double t0 = now_seconds();
      model_.forward_micro(op.slot, first ? model_.input_at(x, a) : nullptr,
                           last ? labels + a : nullptr, rows, grad_scale,
                           micro_batch_seed(step_seed, op.micro, M), stats, true);
      times_.compute += now_seconds() - t0;
      if (!last) send(op.slot, op.micro, rows, false);
    } else {
      if (!last) receive(op.slot, op.micro, rows, true);
      const double t0 = now_seconds();
      model_.backward_micro(op.slot, rows);
      model_.accumulate_micro(op.micro, M);
      times_.compute += now_seconds() - t0;
      if (!first) send(op.slot, op.micro, rows, true);
    }
  }
  wait_all_sends();
  if (on_final) on_final(0);
}

void PipelineRunner::evaluate(const void* x, const std::int32_t* labels, int n, float* stats) {
  const bool first = stage_ == 0, last = stage_ + 1 == stages_;
  const int step = model_.max_batch();
  for (int a = 0, m = 0; a < n; a += step, ++m) {
    const int rows = std::min(step, n - a);
    wait_sends(0);
    if (!first) receive(0, m, rows, false);
    model_.forward_micro(0, first ? model_.input_at(x, a) : nullptr, last ? labels + a : nullptr,
                         rows, 0.0f, 0, stats, false);
    if (!last) send(0, m, rows, false);
  }
  wait_all_sends();
}

}  // namespace dtrain
