// plan/scaling_model.cpp — the arithmetic of plan/scaling_model.hpp.
#include "dtrain/plan/scaling_model.hpp"

#include <algorithm>
#include <cmath>
#include <set>

#include "dtrain/collectives/bucketed.hpp"
#include "dtrain/core/error.hpp"

namespace dtrain {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

/// Streams sharing the intra-node link when every rank of a node uses it at once.
int intra_streams(const Topology& t) { return t.intra.shared ? t.workers_per_node : 1; }

/// The hierarchical sum's part inside one node (collectives/hierarchical.hpp, in place): each
/// rank reads the other G − 1 ranks' values of its 1/G share and writes the sum back into theirs,
/// (G − 1)/G of the bytes each way; with several nodes it writes to the leader only and the
/// others copy the leaders' result out instead. 0 for one worker a node.
double node_sum_s(double bytes, const Topology& t) {
  const int G = t.workers_per_node;
  if (G <= 1) return 0;
  const double others = t.intra.seconds(bytes * (G - 1) / G, intra_streams(t));
  return t.nodes > 1 ? others + t.intra.seconds(bytes, intra_streams(t)) : 2 * others;
}

void check(const Topology& t, const Candidate& c) {
  DT_REQUIRE(t.nodes >= 1, "option --nodes: must be >= 1, got " + std::to_string(t.nodes));
  DT_REQUIRE(t.workers_per_node >= 1,
             "option --workers-per-node: must be >= 1, got " + std::to_string(t.workers_per_node));
  DT_REQUIRE(t.batch >= 1, "the per-worker batch must be >= 1 (--batch-size, or "
                           "--global-batch-size over --nodes × --workers-per-node)");
  DT_REQUIRE(c.strategy != Strategy::ps || c.num_ps >= 1,
             "option --num-ps: async needs at least one parameter server");
  DT_REQUIRE(c.bucket_mb >= 0, "option --bucket-mb: must be >= 0");
  DT_REQUIRE(t.step_cv >= 0 && t.step_cv < 1,
             "option --straggler-cv: must be in [0, 1) (a coefficient of variation), got " +
                 std::to_string(t.step_cv));
}

/// When each range [from[k], end) may start: as backward makes it final, or (--overlap false)
/// when backward ends.
std::vector<double> ready_or_end(const WorkerProfile& p, const std::vector<std::size_t>& from,
                                 double scale, double backward_s, const Topology& t) {
  return t.overlap ? ready_times_s(p, from, scale) : std::vector<double>(from.size(), backward_s);
}

/// The sync step's exposed communication: the training's buckets (plan_buckets), each summed by
/// `allreduce` once ready, in the training's order.
double sync_exposed_s(const WorkerProfile& p, double scale, double backward_s, const Candidate& c,
                      double (*allreduce)(double, const Topology&), const Topology& t) {
  std::vector<std::size_t> from;
  std::vector<double> cost;
  for (const Bucket& b : candidate_buckets(p, t, c)) {
    from.push_back(b.begin);
    cost.push_back(allreduce(t.value_bytes * static_cast<double>(b.end - b.begin), t));
  }
  return exposed_after_backward_s(ready_or_end(p, from, scale, backward_s, t), cost, backward_s);
}

/// The async worker: each layer's gradient pushed as backward finishes it, its new parameters
/// back in the same exchange (fused push-pull in chunks), each ps updating its 1/K of them.
double async_exposed_s(const WorkerProfile& p, double scale, double backward_s, double opt_s,
                       int num_ps, const Topology& t) {
  const Link& link = t.nodes > 1 ? t.inter : t.intra;
  const int streams = t.nodes > 1 ? t.workers_per_node : (link.shared ? t.workers() : 1);
  const double S = p.gradient_bytes();
  std::vector<std::size_t> from;
  std::vector<double> cost;
  for (std::size_t i = p.layers.size(); i-- > 0;) {
    if (p.layers[i].param_floats == 0) continue;
    const double bytes = 4.0 * static_cast<double>(p.layers[i].param_floats);
    from.push_back(p.layers[i].param_offset);
    cost.push_back(2 * link.seconds(bytes, streams) + opt_s * bytes / S / num_ps);
  }
  return exposed_after_backward_s(ready_or_end(p, from, scale, backward_s, t), cost, backward_s);
}

}  // namespace

RingCost bucket_ring(const Topology& t) {
  return ring_cost(t.nodes > 1 ? t.inter : t.intra, t.workers(), t.value_bytes);
}

std::vector<Bucket> candidate_buckets(const WorkerProfile& p, const Topology& t,
                                      const Candidate& c) {
  const auto floats = static_cast<std::size_t>(c.bucket_mb * kMiB / 4);
  return c.latency_aware ? plan_buckets(p.param_floats(), floats, bucket_ring(t))
                         : plan_buckets(p.param_floats(), floats);
}

double expected_max_normal(int n) {
  DT_REQUIRE(n >= 1, "expected_max_normal: n must be >= 1, got " + std::to_string(n));
  if (n == 1) return 0;
  // Simpson's rule on [−12, 12]: the integrand is smooth and negligible beyond (n ≤ 2^31).
  const int steps = 4800;
  const double lo = -12, h = 24.0 / steps;
  const auto f = [n](double x) {
    const double phi = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    return x * n * phi * std::pow(cdf, n - 1);
  };
  double sum = f(lo) + f(lo + steps * h);
  for (int i = 1; i < steps; ++i) sum += f(lo + i * h) * (i % 2 ? 4 : 2);
  return sum * h / 3;
}

double flat_allreduce_s(double bytes, const Topology& t) {
  const int W = t.workers();
  if (W <= 1) return 0;
  const double chunk = bytes / W;
  double step = t.intra.seconds(chunk, intra_streams(t));
  if (t.nodes > 1) step = std::max(step, t.inter.seconds(chunk, 1));
  return 2.0 * (W - 1) * step;
}

double hierarchical_allreduce_s(double bytes, const Topology& t) {
  const int N = t.nodes;
  const double leaders = N > 1 ? 2.0 * (N - 1) * t.inter.seconds(bytes / N, 1) : 0;
  return node_sum_s(bytes, t) + leaders;
}

double ps_round_s(double bytes, double optimizer_s, int num_ps, const Topology& t) {
  const int W = t.workers(), K = num_ps;
  if (t.nodes == 1 && t.intra.shared)  // shared rings: the ps updates, the workers copy
    return std::max(W * optimizer_s / K, 2.0 * W * bytes / t.intra.bytes_per_second());
  const Link& link = t.nodes > 1 ? t.inter : t.intra;
  const int streams = t.nodes > 1 ? (K + t.nodes - 1) / t.nodes : 1;  // ps sharing a NIC
  return W * (optimizer_s / K + 2.0 * link.seconds(bytes / K, streams));
}

double node_cpu_s(const WorkerProfile& p, const Topology& t, const Candidate& c) {
  const int G = t.workers_per_node, W = t.workers(), T = std::max(1, p.threads);
  const double scale = static_cast<double>(t.batch) / p.batch;
  const double compute = (p.forward_ms() + p.backward_ms()) * scale / 1000;
  const double opt = p.optimizer_ms / 1000, S = p.gradient_bytes();
  const double bus = t.intra.bytes_per_second();
  double worker = T * compute, ps = 0;  // one worker's CPU seconds; the node's ps ranks'
  if (c.strategy == Strategy::ps) {
    if (t.nodes == 1 && t.intra.shared) worker += 2.0 * S / bus;  // its copies through the rings
    const int ps_here = t.nodes == 1 ? c.num_ps : (c.num_ps + t.nodes - 1) / t.nodes;
    ps = ps_here * W * opt / c.num_ps;
  } else {
    worker += T * opt;
    const double values = S * t.value_bytes / 4;
    if (t.intra.shared && W > 1) {
      if (c.strategy == Strategy::flat) {
        const double hops = t.nodes == 1 ? 2.0 * (W - 1) : 2.0 * (W - 1) * (G - 1) / G;
        worker += hops * t.intra.seconds(values / W, intra_streams(t));
      } else {  // the node's part of the sum
        worker += node_sum_s(values, t);
      }
    }
  }
  return G * worker + ps;
}

double exposed_after_backward_s(const std::vector<double>& ready_s,
                                const std::vector<double>& cost_s, double backward_s) {
  DT_ASSERT(ready_s.size() == cost_s.size(), "exposed_after_backward_s: sizes differ");
  double end = 0;
  for (std::size_t k = 0; k < ready_s.size(); ++k) end = std::max(end, ready_s[k]) + cost_s[k];
  return std::max(0.0, end - backward_s);
}

std::vector<double> ready_times_s(const WorkerProfile& p, const std::vector<std::size_t>& from,
                                  double scale) {
  std::vector<double> out;
  for (std::size_t f : from) {
    double t = 0;  // backward from the last layer down to the one holding float f
    for (std::size_t i = p.layers.size(); i-- > 0;) {
      t += p.layers[i].backward_ms;
      const LayerCost& l = p.layers[i];
      if (l.param_floats > 0 && l.param_offset <= f) break;
    }
    out.push_back(t * scale / 1000.0);
  }
  return out;
}

Prediction predict(const WorkerProfile& p, const Topology& t, const Candidate& c) {
  check(t, c);
  Prediction r;
  r.candidate = c;
  const double scale = static_cast<double>(t.batch) / p.batch;
  const double forward = p.forward_ms() * scale / 1000, backward = p.backward_ms() * scale / 1000;
  const double opt = p.optimizer_ms / 1000, S = p.gradient_bytes();
  r.compute_ms = (forward + backward) * 1000;
  double step = 0;
  if (c.strategy == Strategy::ps) {
    const double worker =
        forward + backward + async_exposed_s(p, scale, backward, opt, c.num_ps, t);
    const double round = ps_round_s(S, opt, c.num_ps, t);
    r.exposed_ms = (worker - forward - backward) * 1000;
    r.comm_ms = round * 1000;
    step = std::max(worker, round);
    r.bound = round > worker ? "ps" : r.exposed_ms > 0.1 * r.compute_ms ? "network" : "compute";
  } else {
    auto* allreduce = c.strategy == Strategy::flat ? flat_allreduce_s : hierarchical_allreduce_s;
    const double exposed =
        t.workers() > 1 ? sync_exposed_s(p, scale, backward, c, allreduce, t) : 0;
    r.exposed_ms = exposed * 1000;
    r.optimizer_ms = p.optimizer_ms;
    r.comm_ms = allreduce(S * t.value_bytes / 4, t) * 1000;
    const double straggler = t.step_cv * expected_max_normal(t.workers()) * (forward + backward);
    r.straggler_ms = straggler * 1000;
    step = forward + backward + straggler + exposed + opt;
    r.bound = r.exposed_ms > 0.1 * r.compute_ms     ? "network"
              : r.straggler_ms > 0.1 * r.compute_ms ? "stragglers"
                                                    : "compute";
    const std::vector<Bucket> buckets = candidate_buckets(p, t, c);
    r.buckets = buckets.size();
    r.end_mib = 4.0 * static_cast<double>(buckets.back().end - buckets.back().begin) / kMiB;
  }
  if (t.cores_per_node > 0 && p.on_cpu()) {  // the node's CPU work over its cores
    const double floor = node_cpu_s(p, t, c) / t.cores_per_node;
    r.node_cpu_ms = floor * 1000;
    if (floor > step) {
      step = floor;
      r.bound = "cores";
    }
  }
  r.step_ms = step * 1000;
  r.samples_per_s = static_cast<double>(t.workers()) * t.batch / step;
  if (t.workers() == 1) {
    r.efficiency = 1;
  } else {  // against W times one worker of the same mode and batch, alone on one node
    Topology one = t;
    one.nodes = one.workers_per_node = 1;
    // Async across nodes: the one worker reaches its ps over --network, as the candidate's do
    // (over the node's own link it could be faster than any of them: an efficiency above 1),
    // through the NIC, never the shared rings of one node (a shared=1 --network would charge it
    // the ring copies, and the ps round the bus, that no worker across nodes pays).
    if (c.strategy == Strategy::ps && t.nodes > 1) {
      one.intra = t.inter;
      one.intra.shared = false;
    }
    r.efficiency = r.samples_per_s / (t.workers() * predict(p, one, c).samples_per_s);
  }
  return r;
}

std::vector<Candidate> candidates(const WorkerProfile& p, const Topology& t, bool sync, bool async,
                                  double bucket_mb, int num_ps) {
  std::vector<Candidate> out;
  if (sync) {
    std::set<double> sizes = {0, 1, 4, 16, 25, 64, 256, bucket_mb};
    for (Strategy s : {Strategy::flat, Strategy::hierarchical}) {
      for (double mb : sizes) {
        out.push_back({s, mb, 0});
        const Candidate aware{s, mb, 0, true};
        if (s == Strategy::flat &&
            candidate_buckets(p, t, aware) != candidate_buckets(p, t, out.back()))
          out.push_back(aware);
      }
    }
  }
  if (async) {
    std::set<int> ps = {std::max(num_ps, 1)};
    for (int k = 1; k <= t.workers(); k *= 2) ps.insert(k);
    for (int k : ps) out.push_back({Strategy::ps, 0, k});
  }
  return out;
}

std::string describe(const Candidate& c) {
  switch (c.strategy) {
    case Strategy::flat:
      return c.latency_aware ? "sync, flat allreduce, latency-aware" : "sync, flat allreduce";
    case Strategy::hierarchical:
      return c.latency_aware ? "sync, hierarchical, latency-aware" : "sync, hierarchical";
    case Strategy::ps:
      return "async, " + std::to_string(c.num_ps) + " ps";
  }
  return "";
}

}  // namespace dtrain
