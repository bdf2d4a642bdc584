// dtrain/optim/delay_compensation.cpp — DC-ASGD-a's element-wise correction (header for the maths).
#include "dtrain/optim/delay_compensation.hpp"

#include <cmath>
#include <cstring>
#include <string>

#include "dtrain/core/error.hpp"

namespace dtrain {

DelayCompensation::DelayCompensation(std::size_t n, int workers, float lambda0,
                                     float mean_square_decay)
    : n_(n), lambda0_(lambda0), decay_(mean_square_decay) {
  DT_REQUIRE(lambda0 > 0.0f && std::isfinite(lambda0),
             "delay compensation: lambda0 must be a positive number, got " +
                 std::to_string(lambda0));
  DT_REQUIRE(workers >= 1, "delay compensation: needs at least one worker");
  DT_REQUIRE(mean_square_decay >= 0.0f && mean_square_decay < 1.0f,
             "delay compensation: mean-square decay must be in [0, 1)");
  sent_.resize(static_cast<std::size_t>(workers));
}

void DelayCompensation::sent(int w, const float* params, std::size_t begin, std::size_t end) {
  DT_REQUIRE(begin <= end && end <= n_, "delay compensation: range outside the shard");
  std::vector<float>& s = sent_.at(static_cast<std::size_t>(w));
  if (s.empty()) s.assign(params, params + n_);  // the rest is replaced as its ranges are sent
  else std::memcpy(s.data() + begin, params + begin, (end - begin) * sizeof(float));
}

void DelayCompensation::compensate(int w, float* g, const float* params, std::size_t begin,
                                   std::size_t end) {
  DT_REQUIRE(begin <= end && end <= n_, "delay compensation: range outside the shard");
  const std::vector<float>& at = sent_.at(static_cast<std::size_t>(w));
  if (mean_square_.empty()) {
    mean_square_.assign(n_, 0.0f);
    seen_.assign(n_, 0);
  }
  float* ms = mean_square_.data();
  for (std::size_t i = begin; i < end; ++i) {
    const float d = seen_[i] ? decay_ : 0.0f;
    seen_[i] = 1;
    ms[i] = d * ms[i] + (1.0f - d) * g[i - begin] * g[i - begin];
  }
  if (at.empty()) return;  // θ_w = θ: nothing to correct
  const float* tw = at.data();
  constexpr float kEps = 1e-7f;
  for (std::size_t i = begin; i < end; ++i)
    g[i - begin] +=
        lambda0_ / std::sqrt(ms[i] + kEps) * g[i - begin] * g[i - begin] * (params[i] - tw[i]);
}

}  // namespace dtrain
