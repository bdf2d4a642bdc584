// dtrain/train/exchange_impl.hpp (private) — the factories of the GradientExchange classes and
// what they share.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "dtrain/train/exchange.hpp"

namespace dtrain {

/// "non-finite gradient at global step S in tensor T (lower --lr, or ...)", with the error prefix;
/// T is the parameter tensor holding flat index `first_bad`.
std::string nonfinite_message(const Model& m, std::size_t first_bad, std::int64_t step);
/// The same for the first non-finite value of host buffer `host_grads` (param_count() floats).
std::string nonfinite_message(const Model& m, const float* host_grads, std::int64_t step);

/// allreduce (train/allreduce_exchange.cpp).
std::unique_ptr<GradientExchange> make_allreduce_exchange(const Config& c, const Cluster& cluster,
                                                          const TrainPlan& plan, Model& model);
/// ps_async, ps_bounded and ps_sync (train/ps_exchange.cpp).
std::unique_ptr<GradientExchange> make_ps_exchange(const Config& c, const Cluster& cluster,
                                                   const TrainPlan& plan, Model& model);

}  // namespace dtrain
