// dtrain/ps/update_rule.cpp — the choice of the ps's update rule: the one place in the ps that
// looks at the mode (ps/update_rule.hpp).
#include "update_rule.hpp"

#include "dtrain/core/error.hpp"

namespace dtrain {

void UpdateRule::on_chunk(int /*w*/, std::size_t /*c*/, std::size_t /*at*/) {}

void UpdateRule::on_sent(int /*w*/, const float* /*values*/, std::size_t /*begin*/,
                         std::size_t /*end*/) {}

std::unique_ptr<UpdateRule> make_update_rule(ServerCore& core, std::int64_t total_steps,
                                             const ShardTensors& tensors) {
  switch (exchange_kind(core.config())) {
    case ExchangeKind::ps_async:
      return make_async_applier(core, total_steps, tensors);
    case ExchangeKind::ps_sync:
      return make_sync_aggregator(core, total_steps, tensors);
    case ExchangeKind::ps_bounded:
      return make_bounded_aggregator(core, total_steps, tensors);
    case ExchangeKind::allreduce:
      break;
  }
  throw Error(
      format_error(core.who() + ": a parameter server in allreduce mode", __FILE__, __LINE__));
}

}  // namespace dtrain
