// dtrain/train/exchange.cpp — SyncExchange (allreduce + local optimizer) and AsyncExchange
// (ps push-pull). Parameters travel through host buffers for MPI (Debian's Open MPI is not
// CUDA-aware); on the CPU backend device memory is host memory and no copy is made.
#include "dtrain/train/exchange.hpp"

#include <cmath>
#include <vector>

#include "dtrain/comm/guard.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/ps/client.hpp"
#include "dtrain/sync/allreduce.hpp"

namespace dtrain {

std::string first_nonfinite_tensor(const Model& model, const float* grads) {
  for (const auto& t : model.param_tensors())
    for (std::size_t i = 0; i < t.count; ++i)
      if (!std::isfinite(grads[t.offset + i])) return t.name;
  return "";
}

namespace {

/// Host view of a device buffer: the buffer itself on the CPU backend, else a staging copy in
/// the backend's host memory (pinned on CUDA, so the copies run at full PCIe/NVLink speed).
class HostMirror {
 public:
  HostMirror(Backend& be, std::size_t n) : be_(be), n_(n) {
    if (be.device() != Device::cpu)
      host_ = static_cast<float*>(be.allocate_host(n * sizeof(float)));
  }
  ~HostMirror() {
    if (host_) be_.deallocate_host(host_);
  }
  HostMirror(const HostMirror&) = delete;
  HostMirror& operator=(const HostMirror&) = delete;
  float* to_host(const float* dev) {
    if (!host_) return const_cast<float*>(dev);
    be_.copy_to_host(host_, dev, n_ * sizeof(float));
    return host_;
  }
  float* buffer(float* dev) { return host_ ? host_ : dev; }
  void to_device(float* dev) {
    if (host_) be_.copy_to_device(dev, host_, n_ * sizeof(float));
  }

 private:
  Backend& be_;
  std::size_t n_;
  float* host_ = nullptr;
};

std::string nonfinite_message(const Model& m, const float* host_grads, std::int64_t step) {
  const std::string layer = first_nonfinite_tensor(m, host_grads);
  return error_prefix() + "non-finite gradient at global step " + std::to_string(step) +
         " in tensor " + (layer.empty() ? "?" : layer) +
         " (lower --lr, or pass --skip-nonfinite to skip such steps)";
}

[[noreturn]] void nonfinite_fault(const Model& m, const float* host_grads, std::int64_t step) {
  throw RuntimeFault(nonfinite_message(m, host_grads, step));
}

class SyncExchange final : public GradientExchange {
 public:
  SyncExchange(const Config& c, const Cluster& cluster, Model& model, std::int64_t total_steps)
      : c_(c), comm_(cluster.role_comm()), chief_(cluster.is_chief()),
        opt_(c, model.backend(), model.param_count(), total_steps,
             no_decay_ranges(c, model.param_tensors(), 0, model.param_count())),
        mirror_(model.backend(), model.param_count()) {
    Backend& be = model.backend();
    const bool gpu = be.device() == Device::cuda;
    const bool nccl = gpu && (c.allreduce == "nccl" || (c.allreduce == "auto" && !c.allow_gpu_sharing));
    allreduce_ = nccl ? make_nccl_allreduce(comm_, be)
                      : make_mpi_allreduce(comm_, be, model.param_count());
  }

  void start(Model& model, const CheckpointState* resume, std::int64_t global_step) override {
    global_step_ = global_step;
    const std::size_t P = model.param_count();
    float* host = mirror_.buffer(model.params());
    if (resume) {
      std::copy(resume->params.begin(), resume->params.end(), host);
      mirror_.to_device(model.params());
      Backend& be = model.backend();
      if (opt_.m() && !resume->m.empty()) be.copy_to_device(opt_.m(), resume->m.data(), P * 4);
      if (opt_.v() && !resume->v.empty()) be.copy_to_device(opt_.v(), resume->v.data(), P * 4);
      return;
    }
    // Same seed on every worker gives the same initial parameters; the broadcast makes it a fact.
    model.initialize(c_.seed);
    host = mirror_.to_host(model.params());
    DT_CHECK_MPI(MPI_Bcast(host, static_cast<int>(P), MPI_FLOAT, 0, comm_));
    mirror_.to_device(model.params());
  }

  ExchangeResult step(Model& model, int /*samples*/, bool stop_local) override {
    Backend& be = model.backend();
    allreduce_->allreduce_sum(model.grads(), model.param_count());
    // Agree on stopping: one tiny allreduce so every replica leaves at the same step.
    float flag = stop_local ? 1.0f : 0.0f;
    MPI_Request req;
    DT_CHECK_MPI(MPI_Iallreduce(MPI_IN_PLACE, &flag, 1, MPI_FLOAT, MPI_MAX, comm_, &req));
    wait_one(req, comm_timeout(), "stop-flag allreduce over the workers");
    ExchangeResult r;
    r.stop = flag > 0;
    // Every replica holds the same summed gradient, so every replica takes the same decision.
    if (!be.all_finite(model.grads(), model.param_count())) {
      if (!c_.skip_nonfinite) {
        // Every worker takes this branch at the same step and no rank waits on another, so the
        // chief alone reports (one message, not one per worker) and every worker leaves with
        // kExitFault through a clean MPI_Finalize; the last good checkpoint stays the newest.
        const std::string msg = nonfinite_message(model, mirror_.to_host(model.grads()), global_step_);
        if (chief_) log_error(msg);
        throw ReportedError(kExitFault, msg);
      }
      ++skipped_;
      if (chief_)
        log_warn("skipping global step " + std::to_string(global_step_) +
                 ": non-finite gradient (--skip-nonfinite)");
      r.applied = false;
    } else {
      opt_.apply(model.params(), model.grads(), global_step_);
    }
    r.global_step = ++global_step_;
    return r;
  }

  std::int64_t refresh(Model&) override { return global_step_; }

  std::int64_t snapshot(Model& model, CheckpointState& s) override {
    Backend& be = model.backend();
    const std::size_t P = model.param_count();
    s.params.resize(P);
    be.copy_to_host(s.params.data(), model.params(), P * 4);
    s.m.assign(opt_.m() ? P : 0, 0.0f);
    s.v.assign(opt_.v() ? P : 0, 0.0f);
    if (opt_.m()) be.copy_to_host(s.m.data(), opt_.m(), P * 4);
    if (opt_.v()) be.copy_to_host(s.v.data(), opt_.v(), P * 4);
    return global_step_;
  }

  void finish() override {}
  [[nodiscard]] std::int64_t skipped_steps() const override { return skipped_; }

 private:
  Config c_;
  MPI_Comm comm_;
  bool chief_;
  Optimizer opt_;
  HostMirror mirror_;
  std::unique_ptr<GradientAllreduce> allreduce_;
  std::int64_t global_step_ = 0;
  std::int64_t skipped_ = 0;
};

class AsyncExchange final : public GradientExchange {
 public:
  AsyncExchange(const Config& c, const Cluster& cluster, Model& model)
      : c_(c), cluster_(cluster),
        client_(cluster, shard_ranges(model.param_count(), cluster.num_ps()), c.timeout),
        grads_(model.backend(), model.param_count()), params_(model.backend(), model.param_count()) {}

  void start(Model& model, const CheckpointState* resume, std::int64_t global_step) override {
    if (cluster_.is_chief()) {
      if (resume) {
        client_.load(resume->params.data(), resume->m.empty() ? nullptr : resume->m.data(),
                     resume->v.empty() ? nullptr : resume->v.data(), global_step, c_.max_steps);
      } else {
        model.initialize(c_.seed);
        client_.load(params_.to_host(model.params()), nullptr, nullptr, global_step, c_.max_steps);
      }
    }
    // No worker pulls before the chief has loaded the ps.
    MPI_Request req;
    DT_CHECK_MPI(MPI_Ibarrier(cluster_.role_comm(), &req));
    wait_one(req, comm_timeout(), "workers waiting for the chief to initialise the ps");
    refresh(model);
  }

  ExchangeResult step(Model& model, int samples, bool stop_local) override {
    float* g = grads_.to_host(model.grads());
    ExchangeResult r;
    if (!model.backend().all_finite(model.grads(), model.param_count())) {
      if (!c_.skip_nonfinite) nonfinite_fault(model, g, last_step_);
      ++skipped_;
      log_warn("skipping a push after global step " + std::to_string(last_step_) +
               ": non-finite gradient (--skip-nonfinite)");
      // Still exchange a zero-sample pull so the loop keeps its rhythm and sees stop requests.
      const PushResult p = client_.pull(params_.buffer(model.params()));
      params_.to_device(model.params());
      r.applied = false;
      r.global_step = last_step_ = p.global_step;
      r.stop = p.stop_requested || stop_local;
      return r;
    }
    const PushResult p = client_.push_pull(g, samples, params_.buffer(model.params()), stop_local);
    params_.to_device(model.params());
    r.global_step = last_step_ = p.global_step;
    r.stop = p.stop_requested || stop_local;
    r.staleness = static_cast<double>(p.staleness);
    return r;
  }

  std::int64_t refresh(Model& model) override {
    last_step_ = client_.pull(params_.buffer(model.params())).global_step;
    params_.to_device(model.params());
    return last_step_;
  }

  std::int64_t snapshot(Model& model, CheckpointState& s) override {
    const std::size_t P = model.param_count();
    s.params.assign(P, 0.0f);
    std::vector<float> m(P), v(P);
    const std::int64_t step = client_.snapshot(s.params.data(), m.data(), v.data());
    const OptimizerKind kind = optimizer_kind(c_.optimizer);
    s.m = kind == OptimizerKind::sgd ? std::vector<float>{} : std::move(m);
    s.v = kind == OptimizerKind::adam ? std::move(v) : std::vector<float>{};
    return step;
  }

  void finish() override { client_.done(); }
  [[nodiscard]] std::int64_t skipped_steps() const override { return skipped_; }

 private:
  Config c_;
  const Cluster& cluster_;
  PsClient client_;
  HostMirror grads_, params_;
  std::int64_t last_step_ = 0;
  std::int64_t skipped_ = 0;
};

}  // namespace

std::unique_ptr<GradientExchange> make_sync_exchange(const Config& c, const Cluster& cluster,
                                                     Model& model, std::int64_t total_steps) {
  return std::make_unique<SyncExchange>(c, cluster, model, total_steps);
}

std::unique_ptr<GradientExchange> make_async_exchange(const Config& c, const Cluster& cluster,
                                                      Model& model) {
  return std::make_unique<AsyncExchange>(c, cluster, model);
}

}  // namespace dtrain
