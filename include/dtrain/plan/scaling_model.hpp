// dtrain/plan/scaling_model.hpp — predicted step time, samples/s and efficiency of a data-parallel
// run from one worker's profile (model/profile.hpp), the bucket plan (collectives/bucketed.hpp)
// and an alpha-beta model of the links (comm/network.hpp). `dtrain plan` prints it.
//
// Notation: W = nodes × G workers (G per node), b samples per worker and step, S = gradient bytes
// (4 per parameter, fp32; the sync allreduce moves S·v/4 bytes, v = Topology::value_bytes: 2 with
// a 16-bit --wire-dtype, which the flat sum and both levels of the hierarchical one carry), t(m, k)
// = α + m·k/β one link moving m bytes while k streams share it. The intra-node link is shared by
// the node's G ranks when it is a `shared` bus (a host's memory), otherwise each rank has its own
// (NVLink); a node's NIC is shared by its ranks' streams.
//
// Compute: the profile's per-layer forward and backward times scaled by b / profile batch
// (compute linear in the batch); backward produces gradients from the last layer to the first.
// Sync (allreduce): step = forward + backward + exposed communication + the optimizer update
// on the worker (the profile's). Buckets: plan_buckets() of the gradient buffer, the training's
// own (1 MiB at both ends, doubling to --bucket-mb from the front: collectives/bucketed.hpp;
// latency-aware: buckets of at least p·α·β/f bytes for the ring of bucket_ring());
// bucket k is ready when backward has passed the layer holding its first float; one
// communication thread reduces buckets in order, each starting when ready and when the previous
// one is done; the exposed part is what ends after backward (PyTorch DDP's, Horovod's overlap).
// With --overlap false every bucket (and push) is ready only when backward ends.
//   flat ring over W ranks (Patarasuk & Yuan 2009; Thakur et al. 2005):
//        2(W−1) steps of S/W bytes, each step paced by its slowest hop:
//        T = 2(W−1)·max(t_intra(S/W, k), t_inter(S/W, 1) if nodes > 1), k = G if shared else 1;
//        on one node 2(W−1)α + 2(W−1)/W·S·k/β, the textbook 2(n−1)/n·S/β + 2(n−1)α for k = 1
//   hierarchical (Horovod's; collectives/hierarchical.hpp, summed in place in the node's shared
//        memory): on one node each rank reads the other G−1 ranks' values of its 1/G share and
//        writes the sum back into theirs, 2·t_intra((G−1)/G·S, k); with N > 1 nodes it writes to
//        the leader only, t_intra((G−1)/G·S, k), the leaders sum in a ring (2(N−1)·t_inter(S/N,
//        1)) and the others copy the result out, t_intra(S, k). A 16-bit wire is priced as that
//        sum of half the bytes (its slots' copies in and out are not counted)
// Async (K parameter servers, Downpour; ps/protocol.hpp's fused push-pull): a worker pushes each
// layer's gradient as backward finishes it and gets that part's new parameters back in the same
// exchange: per layer 2·t_w(bytes) plus the ps's update of it (the profile's optimizer ms ×
// bytes/S / K), in layer order, exposed part as above; t_w over its node's NIC shared by its G
// workers (nodes > 1), or the intra-node link shared by all W (one node). A ps serves a round of
// W pushes (each S/K bytes in and out, each updated):
//        nodes > 1 or an unshared intra link: W·(optimizer/K + 2·t_ps(S/K)), t_ps over the NIC
//          shared by the ⌈K/nodes⌉ ps of a node;
//        one node, shared bus (--ps-shm's rings: the workers copy, the ps only updates):
//          max(W·optimizer/K, 2·W·S/β): the ps's updates or the bus, whichever is slower.
// step = max(worker's step, ps round): the slower side paces it.
// Cores (Topology::cores_per_node C > 0, CPU profiles only): the step takes at least a node's
// CPU work over its C cores, the work of the G workers there — T·(forward + backward) each with
// T = the profile's threads, sync also T·optimizer — plus the copies through a shared (memory)
// intra-node link, which keep a CPU busy as long as they take on the bus: sync, the intra-node
// part of each worker's exchange (flat: 2(W−1) hops on one node, 2(W−1)(G−1)/G of them across
// nodes, each t_intra(S/W, k); hierarchical: the node's part of the sum); async on one node,
// each worker's 2·S/β through the ps's rings; plus the node's ps updates (⌈K/nodes⌉ ps, W·
// optimizer/K each). Where that floor is above the step above, it is the step (bound "cores").
// Stragglers (Topology::step_cv σ > 0, sync only): every worker's forward + backward varies from
// step to step, independently, normal with standard deviation σ × its mean; a synchronous step
// waits for the slowest of the W, E[max of W] = mean × (1 + σ·e_W), e_W = E[max of W standard
// normals] (expected_max_normal; e_2 = 1/√π ≈ 0.56, e_8 ≈ 1.42, e_512 ≈ 3.04): the step gains
// σ·e_W·(forward + backward), which the fast workers spend waiting in the exchange (Chen et al.
// 2016, "Revisiting Distributed Synchronous SGD", measure this tail). Async workers wait for no
// one: no term.
// samples/s = W·b / step; efficiency = samples/s / (W × the samples/s of one worker of the same
// mode at the same batch on one node; async across nodes, its ps over the network between
// nodes): T1/(N·TN) at a fixed per-worker batch.
//
// Not modelled (stated in every plan's output): contention for memory bandwidth or caches
// between ranks' compute and with the copies (a host whose compute per sample rises with its busy
// cores or its communication's traffic), stragglers beyond --straggler-cv's independent normal
// step times (a worker slower on every step: load imbalance), the data pipeline (synthetic or
// cached data), the first step's warm-up, sync training through ps (--mode sync --num-ps K), 16-bit
// ps pushes (--wire-dtype: the async exchange is priced in fp32) and the conversions' compute, and
// the statistical cost of async's stale gradients (samples/s is not time to accuracy).
#pragma once

#include <string>
#include <vector>

#include "dtrain/collectives/bucketed.hpp"
#include "dtrain/comm/network.hpp"
#include "dtrain/model/profile.hpp"

namespace dtrain {

/// The cluster a plan prices.
struct Topology {
  int nodes = 1;             ///< ≥ 1
  int workers_per_node = 1;  ///< G ≥ 1
  Link inter;                ///< between nodes (--network)
  Link intra;                ///< inside a node (--intra-node)
  int batch = 1;             ///< samples per worker and step (> 0)
  bool overlap = true;       ///< --overlap: buckets and pushes start during backward (else after)
  double value_bytes = 4;    ///< sync allreduce bytes per gradient value (--wire-dtype: 4 or 2)
  int cores_per_node = 0;    ///< CPU cores of a node (--cores-per-node; 0: not priced)
  /// σ ≥ 0: the coefficient of variation of one worker's forward + backward from step to step
  /// (--straggler-cv; 0: every step takes the profile's time)
  double step_cv = 0;
  [[nodiscard]] int workers() const { return nodes * workers_per_node; }
};

/// How gradients are exchanged.
enum class Strategy { flat, hierarchical, ps };

/// One configuration to price.
struct Candidate {
  Strategy strategy = Strategy::flat;
  double bucket_mb = 25;  ///< sync: bucket size, MiB (0: one bucket)
  int num_ps = 0;         ///< ps: K ≥ 1
  /// sync: the latency-aware plan for bucket_ring(t) (collectives/bucketed.hpp; the training's
  /// --bucket-link with the link bucket_ring names) instead of plan_buckets' fixed 25th
  bool latency_aware = false;
};

/// The model's answer for one Candidate; times in ms per step.
struct Prediction {
  Candidate candidate;
  double compute_ms = 0;    ///< forward + backward at the topology's batch
  double exposed_ms = 0;    ///< communication after backward (sync; async: the worker's)
  double optimizer_ms = 0;  ///< on the worker (sync); 0 for async (the ps applies it)
  /// sync: waiting for the slowest worker's forward + backward, σ·e_W·compute (0 for async)
  double straggler_ms = 0;
  double comm_ms = 0;  ///< sync: the whole exchange, hidden or not; async: a ps round
  double step_ms = 0;
  double samples_per_s = 0;
  double efficiency = 0;    ///< samples/s over W × one worker's (see the file comment)
  std::size_t buckets = 0;  ///< sync: how many buckets the plan cuts (0 for async)
  double end_mib = 0;       ///< sync: the size of the bucket holding the first layers, MiB
  /// A node's CPU work per step over its cores, ms (0 when not priced: no cores_per_node, or a
  /// GPU profile); the step is at least this
  double node_cpu_ms = 0;
  std::string bound;  ///< what paces the step: "compute", "network", "ps", "cores"
};

/// E[max of n independent standard normal variables] (n ≥ 1; 0 for n = 1), by quadrature of
/// ∫ x·n·φ(x)·Φ(x)^(n−1) dx to about 1e-6. Throws InputError for n < 1.
double expected_max_normal(int n);

/// Ring allreduce of `bytes` over the topology's W ranks (flat): see the file comment. W = 1: 0.
double flat_allreduce_s(double bytes, const Topology& t);
/// Hierarchical allreduce of `bytes`: the node's part (in place) + the leaders' ring.
double hierarchical_allreduce_s(double bytes, const Topology& t);
/// One ps's time for a round of W push-pulls of S bytes with K ps (see the file comment).
double ps_round_s(double bytes, double optimizer_s, int num_ps, const Topology& t);
/// One node's CPU seconds per step for candidate c (see "Cores" in the file comment), whatever
/// the profile's device or cores_per_node.
double node_cpu_s(const WorkerProfile& p, const Topology& t, const Candidate& c);

/// Communication exposed after backward: transfers k = 0, 1, ... each ready at ready_s[k] (seconds
/// from backward's start, non-decreasing), taking cost_s[k], run one at a time in order
/// (start = max(ready, previous end)); returns max(0, last end − backward_s). Throws Error when
/// the sizes differ.
double exposed_after_backward_s(const std::vector<double>& ready_s,
                                const std::vector<double>& cost_s, double backward_s);

/// When (seconds from backward's start, at `scale` × the profile's times) the gradient floats
/// [from[k], end) are final, backward running from the last layer to the first.
std::vector<double> ready_times_s(const WorkerProfile& p, const std::vector<std::size_t>& from,
                                  double scale);

/// The ring whose latency sizes the latency-aware buckets: the W workers over the link between
/// nodes (nodes > 1, --network) or inside the node (--intra-node), at the topology's value bytes.
/// Training with `--bucket-link` set to that link plans the same buckets.
RingCost bucket_ring(const Topology& t);

/// The buckets a sync candidate cuts the profile's gradient into (the training's own).
std::vector<Bucket> candidate_buckets(const WorkerProfile& p, const Topology& t,
                                      const Candidate& c);

/// Prices one candidate. Throws InputError for a topology or candidate out of range (names the
/// option: --nodes, --workers-per-node, --num-ps, --bucket-mb).
Prediction predict(const WorkerProfile& p, const Topology& t, const Candidate& c);

/// The candidates `dtrain plan` prices: flat and hierarchical allreduce with bucket sizes
/// {0 (one bucket), 1, 4, 16, 25, 64, 256 MiB and `bucket_mb`}, the flat ones also latency-aware
/// where that plan differs from the fixed one for `p`'s gradient (not hierarchical: its leaders'
/// ring is N ranks long, not the W the latency-aware plan is sized for), and async with K ps for K
/// in {1, 2, 4, ... ≤ W, and `num_ps`}; `sync`/`async` false leave that mode out.
std::vector<Candidate> candidates(const WorkerProfile& p, const Topology& t, bool sync, bool async,
                                  double bucket_mb, int num_ps);

/// "flat allreduce", "hierarchical allreduce" or "async, K ps".
std::string describe(const Candidate& c);

}  // namespace dtrain
