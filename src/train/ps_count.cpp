// dtrain/train/ps_count.cpp — the `--num-ps auto` rule (train/ps_count.hpp).
#include "dtrain/train/ps_count.hpp"

#include <algorithm>
#include <cstdio>

#include "dtrain/core/error.hpp"

namespace dtrain {

PsCountChoice choose_num_ps(const PsCountInput& in) {
  DT_REQUIRE(in.world >= 2, "option --num-ps auto: needs at least 2 MPI ranks (a ps and a "
                            "worker), got " +
                                std::to_string(in.world));
  DT_REQUIRE(in.flops_per_sample > 0,
             "option --num-ps auto: the model computes nothing (0 flops per sample)");
  PsCountChoice out;
  const int P = std::max(1, in.stages);
  const int fewest_workers = std::max(1, in.min_workers);
  const int most =
      in.max_ps > 0 ? std::min(in.max_ps, in.world - fewest_workers) : in.world - fewest_workers;
  const auto batch_of = [&](int workers) {  // per worker, or per pipeline replica
    return in.global_batch > 0 ? static_cast<double>(in.global_batch) / (workers / P)
                               : static_cast<double>(in.batch);
  };
  bool found = false;
  for (int k = std::max(1, in.min_ps); k <= most; ++k) {
    const int workers = in.world - k;
    if (workers % P != 0) continue;  // whole pipelines only
    found = true;
    out.num_ps = k;
    out.rho =
        in.beta * (in.push_bytes + in.reply_bytes) / (in.flops_per_sample * batch_of(workers));
    if (k >= workers * out.rho) break;  // the smallest K with K ≥ W · ρ
  }
  DT_REQUIRE(found, "option --num-ps auto: no count of ps from " +
                        std::to_string(std::max(1, in.min_ps)) + " to " + std::to_string(most) +
                        " leaves the other ranks of " + std::to_string(in.world) +
                        (fewest_workers > 1 ? " the " + std::to_string(fewest_workers) +
                                                  " workers --replicas-to-aggregate needs, and"
                                            : std::string()) +
                        " a multiple of the " + std::to_string(P) +
                        " pipeline stages; give --num-ps K or another world size");
  const int workers = in.world - out.num_ps;
  char line[320];
  std::snprintf(line, sizeof line,
                "# --num-ps auto: %d ps for %d workers: each ps serves %.2f of what it can "
                "(W·rho/K, rho = beta·(push %.3g + reply %.3g bytes) / (%.3g flops/sample × batch "
                "%.4g) = %.3g, beta %.0f flops/byte)",
                out.num_ps, workers, workers * out.rho / out.num_ps, in.push_bytes, in.reply_bytes,
                in.flops_per_sample, batch_of(workers), out.rho, in.beta);
  out.why = line;
  if (workers * out.rho > out.num_ps && out.num_ps == most) {
    if (in.max_ps > 0 && out.num_ps == in.max_ps)
      out.why += ", at most " + std::to_string(in.max_ps) + " (one ps per parameter tensor)";
    else if (fewest_workers > 1)
      out.why += ", at most " + std::to_string(most) + " (--replicas-to-aggregate " +
                 std::to_string(fewest_workers) + " needs as many workers)";
  }
  return out;
}

}  // namespace dtrain
