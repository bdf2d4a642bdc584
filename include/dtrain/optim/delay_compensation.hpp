// dtrain/optim/delay_compensation.hpp — delay-compensated asynchronous SGD at the ps (DC-ASGD,
// Zheng et al. 2017, "Asynchronous Stochastic Gradient Descent with Delay Compensation", ICML).
//
// A worker's gradient g was computed at the parameters θ_w the ps last sent it; by the time it
// arrives the ps holds θ. DC-ASGD corrects g to a first-order estimate of the gradient at θ,
//     g̃ = g + λ · g ⊙ g ⊙ (θ − θ_w),
// the Hessian approximated by the diagonal of the outer product g gᵀ. The adaptive variant
// (DC-ASGD-a, the paper's recommended one) divides λ by √MeanSquare(g), the running mean of g²
// over every push (decay 0.95), so λ0 (--delay-compensation) needs no rescaling per layer or
// model. Everything is element-wise over the ps's shard, on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace dtrain {

class DelayCompensation {
 public:
  /// For a shard of `n` floats served to `workers` workers; `lambda0` > 0 (the paper uses 0.04–2
  /// for DC-ASGD-a). `mean_square_decay` in [0, 1): weight of the old mean square (paper: 0.95).
  /// Holds workers + 1 copies of the shard (θ_w per worker and the mean square). Throws
  /// InputError unless lambda0 is finite and > 0, workers ≥ 1 and the decay is in [0, 1).
  DelayCompensation(std::size_t n, int workers, float lambda0, float mean_square_decay = 0.95f);

  /// Records that worker `w` (0-based) now holds floats [begin, end) of `params` (the shard's n
  /// floats, host): the θ_w its next gradient will have been computed at. Call for every range a
  /// reply carries, with the values sent. Throws InputError unless begin ≤ end ≤ n,
  /// std::out_of_range for w outside [0, workers).
  void sent(int w, const float* params, std::size_t begin, std::size_t end);

  /// Replaces worker w's gradient g over floats [begin, end) of the shard (g: those end − begin
  /// floats, host, g[0] being float `begin`) by
  /// g̃ = g + λ0/√(MS + ε) ⊙ g ⊙ g ⊙ (θ − θ_w), where MS is first updated with this g:
  /// MS ← d·MS + (1 − d)·g² (a float's first push sets MS = g²), and ε = 1e-7. `params` is θ
  /// (n floats, host). Before w's first sent(), θ_w = θ (no correction). Ranges are independent,
  /// so a shard may be compensated chunk by chunk; each float once per push. Throws as sent().
  void compensate(int w, float* g, const float* params, std::size_t begin, std::size_t end);

 private:
  std::size_t n_;
  float lambda0_, decay_;
  std::vector<std::vector<float>> sent_;  ///< θ_w per worker (empty until the first sent(w))
  std::vector<float> mean_square_;        ///< MS per float
  std::vector<unsigned char> seen_;       ///< per float: MS holds a push
};

}  // namespace dtrain
