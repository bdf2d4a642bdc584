// dtrain/train/exchange.cpp — what the GradientExchange classes share, and the choice among them.
#include "dtrain/train/exchange.hpp"

#include <cmath>

#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/error.hpp"
#include "exchange_impl.hpp"

namespace dtrain {

std::string tensor_at(const Model& model, std::size_t index) {
  for (const auto& t : model.param_tensors())
    if (index >= t.offset && index < t.offset + t.count) return t.name;
  return "";
}

std::string first_nonfinite_tensor(const Model& model, const float* grads) {
  for (std::size_t i = 0; i < model.param_count(); ++i)
    if (!std::isfinite(grads[i])) return tensor_at(model, i);
  return "";
}

namespace {
std::string nonfinite_text(const std::string& tensor, std::int64_t step) {
  return error_prefix() + "non-finite gradient at global step " + std::to_string(step) +
         " in tensor " + (tensor.empty() ? "?" : tensor) +
         " (lower --lr, or pass --skip-nonfinite to skip such steps; not with --pipeline-stages)";
}
}  // namespace

std::string nonfinite_message(const Model& m, std::size_t first_bad, std::int64_t step) {
  return nonfinite_text(tensor_at(m, first_bad), step);
}

std::string nonfinite_message(const Model& m, const float* host_grads, std::int64_t step) {
  return nonfinite_text(first_nonfinite_tensor(m, host_grads), step);
}

GradsFinal GradientExchange::begin_step(Model& /*model*/, std::int64_t /*s*/, int /*n*/,
                                        bool /*stop_local*/) {
  return {};
}

double GradientExchange::wait_limit() const { return comm_timeout(); }

bool GradientExchange::epoch_over(int epoch, std::int64_t s, std::int64_t /*global_step*/) const {
  return s >= local_steps(epoch);
}

std::unique_ptr<GradientExchange> make_exchange(const Config& c, const Cluster& cluster,
                                                const TrainPlan& plan, Model& model) {
  if (exchange_kind(c) == ExchangeKind::allreduce)
    return make_allreduce_exchange(c, cluster, plan, model);
  return make_ps_exchange(c, cluster, plan, model);
}

}  // namespace dtrain
