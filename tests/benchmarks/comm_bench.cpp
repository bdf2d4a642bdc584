// tests/benchmarks/comm_bench.cpp — dtrain's communication paths against bare MPI, in the same
// run and process set, with nccl-tests' definitions (github.com/NVIDIA/nccl-tests,
// doc/PERFORMANCE.md): algbw = bytes / time; allreduce busbw = algbw · 2(n−1)/n.
//
//   allreduce     bare: MPI_Allreduce(MPI_IN_PLACE, B bytes of floats, MPI_SUM) over all ranks
//                 dtrain: the sync exchange's path (collectives/bucketed.hpp): the same buffer
//                 summed in --bucket-mb buckets on the communication thread, with the finiteness
//   hier_allreduce  bare: as above; dtrain: the same buckets summed hierarchically
//                 (--allreduce hierarchical, collectives/hierarchical.hpp: shared memory inside the
//                 node, MPI between node leaders; --ranks-per-node K: nodes of K ranks), in place
//                 in the node's homes as training sums its gradient; a third sum alternated with
//                 the two, the same through the slots, copied in and out (JSON slots_hier_us,
//                 ratio_vs_slots_hier)
//   wire_allreduce  bare: as above; dtrain: the buckets with --wire-dtype (default bf16) on the
//                 wire, summed in fp32 (collectives/wire.hpp); busbw counts fp32 bytes for both
//   hier_wire_allreduce  bare: as above; dtrain: hierarchically with --wire-dtype in the node's
//                 slots and between leaders; a third sum alternated with the two, the same
//                 hierarchical one in fp32 (JSON fp32_hier_us, ratio_vs_fp32_hier)
//   ps_push_pull  1 ps (the last rank) and n−1 workers; per round every worker sends B bytes to the
//                 ps and receives B bytes back.
//                 bare: MPI_Isend / MPI_Irecv of B bytes each way, the ps replying to each worker
//                 as its message arrives; dtrain: PsClient::push_pull against run_parameter_server
//                 (plain SGD at a tiny learning rate: the ps applies every push, on --ps-threads
//                 OpenMP threads, default 1; with --ps-shm 1, the default, as in training, the
//                 workers on the ps's node push through the ring it shares with them,
//                 ps/shared_ring.hpp — JSON "ps_shared_ring": the fraction of pushes that did)
//                 bandwidth = bytes moved (2·B·workers) / time per round; "ps upd us": the
//                 ps's time in the optimizer per round (PsStats::optimizer_seconds over its
//                 updates, × workers) — work bare point-to-point does not do, on the critical
//                 path where the ps shares a core
//   nccl_allreduce  (built with CUDA, and a GPU per rank on every node; skipped otherwise, saying
//                 why) bare: one ncclAllReduce (in place, float sum) over B bytes of device memory
//                 on its own stream, then cudaStreamSynchronize; dtrain: the sync exchange's GPU
//                 path — --bucket-mb buckets started in plan order by GradientAllreduce::start_sum
//                 (NCCL on its own stream behind the backend's), then wait(). busbw as allreduce (0
//                 with one rank: the ratio is then the time ratio, which it equals otherwise)
// allreduce alternates bare and dtrain rounds per size; push-pull alternates blocks of bare rounds
// and of dtrain's (the ps event loop runs until DONE), three of each; each block after a warm-up
// round, the median over all rounds reported.
// Sizes run from --min-bytes (a multiple of 4: whole floats), ×4 up to --max-bytes. Prints a
// table and writes one JSON object per line to --out; a bad option is one "comm_bench: error:"
// line naming it, exit 2.
#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cstdio>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dtrain/collectives/allreduce.hpp"
#include "dtrain/collectives/bucketed.hpp"
#include "dtrain/comm/cluster.hpp"
#include "dtrain/comm/mpi_check.hpp"
#include "dtrain/core/config.hpp"
#include "dtrain/core/log.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/ps/client.hpp"
#include "dtrain/ps/server.hpp"

#ifdef DTRAIN_HAVE_CUDA
#include <cuda_runtime.h>
#include <nccl.h>
#endif

namespace {
using namespace dtrain;

struct Options {
  std::size_t min_bytes = 64 << 10, max_bytes = 256u << 20;
  double bucket_mb = 25;
  int iters = 0;           // 0: by size
  int ps_threads = 1;      // OpenMP threads of the ps (dtrain's --ps-threads)
  int ps_chunk_kb = 1024;  // dtrain's --ps-chunk-kb
  bool ps_shm = true;      // dtrain's --ps-shm
  std::string out = "comm_bench.jsonl";
  std::string ops =
      "allreduce,hier_allreduce,wire_allreduce,hier_wire_allreduce,ps_push_pull,nccl_allreduce";
  std::string wire_dtype = "bf16";  // wire_allreduce's --wire-dtype
  int ranks_per_node = 0;           // hier_allreduce: nodes of this many ranks (0: real nodes)
};

/// The ops --ops may name, in the order they run.
constexpr const char* kOps[] = {"allreduce",           "hier_allreduce", "wire_allreduce",
                                "hier_wire_allreduce", "ps_push_pull",   "nccl_allreduce"};

/// Whether the comma-separated --ops list names `op`.
bool has_op(const Options& o, const std::string& op) {
  std::size_t at = 0;
  while (at <= o.ops.size()) {
    const std::size_t comma = std::min(o.ops.find(',', at), o.ops.size());
    if (o.ops.compare(at, comma - at, op) == 0) return true;
    at = comma + 1;
  }
  return false;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

/// The message sizes of every op: --min-bytes, ×4 while at most --max-bytes (no wrap past the
/// largest size_t).
std::vector<std::size_t> sizes(const Options& o) {
  std::vector<std::size_t> v;
  for (std::size_t b = o.min_bytes; b <= o.max_bytes; b *= 4) {
    v.push_back(b);
    if (b > o.max_bytes / 4) break;
  }
  return v;
}

int iterations(const Options& o, std::size_t bytes) {
  if (o.iters > 0) return o.iters;
  return bytes <= (1u << 20) ? 50 : bytes <= (16u << 20) ? 20 : 6;
}

/// Times fn() over all ranks of comm: barrier, fn, max over ranks of the elapsed time.
template <typename Fn>
double timed(MPI_Comm comm, Fn fn) {
  MPI_Barrier(comm);
  const double t0 = MPI_Wtime();
  fn();
  double dt = MPI_Wtime() - t0, worst = 0;
  MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, comm);
  return worst;
}

struct Row {
  std::string op;
  std::size_t bytes = 0;
  double bare_s = 0, dtrain_s = 0, bare_gbps = 0, dtrain_gbps = 0;
  double ps_update_s = -1;  ///< push-pull: the ps's optimizer time per round (−1: not measured)
  double shared_ring = -1;  ///< push-pull: fraction of pushes through a shared ring (−1: n/a)
  double ref_s = -1;        ///< a third sum's median (−1: n/a): the one ref_key names
  /// what ref_s times: "fp32_hier" (hier_wire_allreduce: the hierarchical sum in fp32) or
  /// "slots_hier" (hier_allreduce: through the slots, copied in and out, instead of in place)
  std::string ref_key;
};

void report(std::FILE* json, int rank, int ranks, const Row& r) {
  if (rank != 0) return;
  // dtrain_GBps / bare_GBps: both count the same bytes, so the time ratio (defined also where
  // busbw is 0, one rank).
  const double ratio = r.bare_s / r.dtrain_s;
  char upd[32] = "-";
  if (r.ps_update_s >= 0) std::snprintf(upd, sizeof upd, "%.1f", r.ps_update_s * 1e6);
  std::printf("%14s %12zu %10.1f %8.2f %10.1f %8.2f %7.3f %10s\n", r.op.c_str(), r.bytes,
              r.bare_s * 1e6, r.bare_gbps, r.dtrain_s * 1e6, r.dtrain_gbps, ratio, upd);
  std::fflush(stdout);
  std::string extra;
  if (r.ps_update_s >= 0) extra += ", \"ps_update_us\": " + std::string(upd);
  if (r.shared_ring >= 0) extra += ", \"ps_shared_ring\": " + std::to_string(r.shared_ring);
  if (r.ref_s > 0) {  // dtrain's sum against the reference sum, same rounds
    extra += ", \"" + r.ref_key + "_us\": " + std::to_string(r.ref_s * 1e6) + ", \"ratio_vs_" +
             r.ref_key + "\": " + std::to_string(r.ref_s / r.dtrain_s);
    std::printf("%14s %12s %10s %8s %10.1f %8s %7.3f  (vs %s)\n", "", "", "", "", r.ref_s * 1e6, "",
                r.ref_s / r.dtrain_s,
                r.ref_key == "fp32_hier" ? "fp32 hierarchical" : "hierarchical through slots");
  }
  std::fprintf(
      json,
      "{\"op\": \"%s\", \"ranks\": %d, \"bytes\": %zu, \"bare_GBps\": %.4f, "
      "\"dtrain_GBps\": %.4f, \"ratio\": %.4f, \"bare_us\": %.1f, \"dtrain_us\": %.1f%s}\n",
      r.op.c_str(), ranks, r.bytes, r.bare_gbps, r.dtrain_gbps, ratio, r.bare_s * 1e6,
      r.dtrain_s * 1e6, extra.c_str());
  std::fflush(json);
}

/// An allreduce row: one warm-up round of each, then iterations(o, bytes) rounds alternating bare
/// and dtrain (and `ref`, when given: Row::ref_s), each after reset(); medians, and busbw =
/// bytes / time · 2(ranks − 1) / ranks.
template <typename Reset, typename Bare, typename Ours>
Row alternate_allreduce(const char* op, const Options& o, std::size_t bytes, int ranks, Reset reset,
                        Bare bare, Ours ours, const std::function<void()>& ref = {}) {
  std::vector<double> tb, td, tr;
  reset();
  timed(MPI_COMM_WORLD, bare);
  timed(MPI_COMM_WORLD, ours);
  if (ref) timed(MPI_COMM_WORLD, ref);
  for (int i = 0; i < iterations(o, bytes); ++i) {
    reset();
    tb.push_back(timed(MPI_COMM_WORLD, bare));
    reset();
    td.push_back(timed(MPI_COMM_WORLD, ours));
    if (!ref) continue;
    reset();
    tr.push_back(timed(MPI_COMM_WORLD, ref));
  }
  const double bus = 2.0 * (ranks - 1) / ranks;
  Row r;
  r.op = op;
  r.bytes = bytes;
  r.bare_s = median(tb);
  r.dtrain_s = median(td);
  if (ref) r.ref_s = median(tr);
  r.bare_gbps = static_cast<double>(bytes) / r.bare_s * bus / 1e9;
  r.dtrain_gbps = static_cast<double>(bytes) / r.dtrain_s * bus / 1e9;
  return r;
}

/// allreduce, hier_allreduce, wire_allreduce and hier_wire_allreduce: bare MPI_Allreduce against
/// the bucketed sync exchange summing each bucket as `how` says (MPI_Allreduce; shared memory +
/// node leaders, in place in the node's homes as training sums; the values 16 bits on the wire;
/// both). busbw counts fp32 bytes for both, so the ratio is the time ratio. `ref_how`, when
/// given: a third sum so made, alternated with the two (Row::ref_s, named `ref_key`).
Row bench_allreduce(const Options& o, std::size_t bytes, int ranks, const char* op = "allreduce",
                    const ReduceOptions& how = {}, const ReduceOptions* ref_how = nullptr,
                    const char* ref_key = "") {
  const std::size_t n = bytes / sizeof(float);
  std::vector<float> buf(n + 1, 1.0f);
  const auto bucket = static_cast<std::size_t>(o.bucket_mb * 1024 * 1024 / sizeof(float));
  BucketedAllreduce buckets(MPI_COMM_WORLD, n, bucket, true, how);
  float* mine = buckets.home() != nullptr ? buckets.home() : buf.data();  // in place: the home
  std::optional<BucketedAllreduce> ref_buckets;
  if (ref_how) ref_buckets.emplace(MPI_COMM_WORLD, n, bucket, true, *ref_how);
  auto bare = [&] {
    DT_CHECK_MPI(MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD));
  };
  auto ours = [&] {
    buckets.begin(mine, 0.0f);
    (void)buckets.finish(comm_timeout());
  };
  std::function<void()> ref;
  if (ref_buckets) {
    ref = [&] {
      ref_buckets->begin(buf.data(), 0.0f);
      (void)ref_buckets->finish(comm_timeout());
    };
  }
  // Keep the values small: repeated sums of 1/ranks stay exact and finite.
  auto reset = [&] {
    std::fill(buf.begin(), buf.end(), 1.0f / static_cast<float>(ranks));
    if (mine != buf.data()) std::fill(mine, mine + n + 1, 1.0f / static_cast<float>(ranks));
  };
  Row r = alternate_allreduce(op, o, bytes, ranks, reset, bare, ours, ref);
  r.ref_key = ref_key;
  return r;
}

/// Bare point-to-point in the push-pull pattern: each worker sends B and receives B; the ps
/// answers each worker as soon as that worker's message has arrived.
void bare_push_pull(const Cluster& cl, std::vector<char>& a, std::vector<std::vector<char>>& in) {
  const int bytes = static_cast<int>(a.size());
  if (cl.is_worker()) {
    MPI_Request req[2];
    DT_CHECK_MPI(MPI_Irecv(in[0].data(), bytes, MPI_BYTE, cl.ps_rank(0), 7, cl.world(), &req[0]));
    DT_CHECK_MPI(MPI_Isend(a.data(), bytes, MPI_BYTE, cl.ps_rank(0), 7, cl.world(), &req[1]));
    std::vector<MPI_Request> v(req, req + 2);
    wait_all(v, comm_timeout(), "bare push-pull");
    return;
  }
  const int W = cl.num_workers();
  std::vector<MPI_Request> recv(W), send(W, MPI_REQUEST_NULL);
  for (int w = 0; w < W; ++w)
    DT_CHECK_MPI(
        MPI_Irecv(in[w].data(), bytes, MPI_BYTE, cl.worker_rank(w), 7, cl.world(), &recv[w]));
  for (int k = 0; k < W; ++k) {
    MPI_Status st;
    const int w = wait_any(recv, comm_timeout(), "bare push-pull", &st);
    DT_CHECK_MPI(
        MPI_Isend(in[w].data(), bytes, MPI_BYTE, cl.worker_rank(w), 7, cl.world(), &send[w]));
  }
  wait_all(send, comm_timeout(), "bare push-pull");
}

/// dtrain's push-pull rounds against one ps session (run_parameter_server until every worker
/// sent DONE): a warm-up round, then `rounds` timed ones appended to `td` (max over workers).
/// On the ps, adds its session's statistics to `ps`.
void dtrain_push_pull_block(const Options& o, std::size_t n, const Cluster& cl, int rounds,
                            std::vector<float>& grads, std::vector<float>& params,
                            std::vector<double>& td, PsStats& ps) {
  Config c;
  c.mode = Mode::async;
  c.optimizer = OptimizerKind::sgd;
  c.momentum = 0;
  c.weight_decay = 0;
  c.lr = 1e-9;
  c.ps_chunk_kb = o.ps_chunk_kb;
  c.ps_shm = o.ps_shm;
  const ShardRange shard{0, n};
  if (cl.is_ps()) {
    omp_set_num_threads(o.ps_threads);
    const std::atomic<bool> stop{false};
    const PsStats s = run_parameter_server(cl, c, shard, 1 << 30, stop);  // until all sent DONE
    ps.updates += s.updates;
    ps.optimizer_seconds += s.optimizer_seconds;
    ps.pushes += s.pushes;
    ps.shared_ring_pushes += s.shared_ring_pushes;
    return;
  }
  PsClient client(cl, {shard}, comm_timeout(), static_cast<std::size_t>(o.ps_chunk_kb) * 1024);
  if (cl.is_chief()) client.load(params.data(), nullptr, nullptr, 0, 0);
  MPI_Barrier(cl.role_comm());
  for (int i = 0; i < rounds + 1; ++i) {
    MPI_Barrier(cl.role_comm());
    const double t0 = MPI_Wtime();
    (void)client.push_pull(grads.data(), 1, params.data(), false);
    double dt = MPI_Wtime() - t0, worst = 0;
    MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, cl.role_comm());
    if (i > 0) td.push_back(worst);
  }
  client.done();
}

Row bench_push_pull(const Options& o, std::size_t bytes, const Cluster& cl) {
  const std::size_t n = bytes / sizeof(float);
  const int W = cl.num_workers();
  const int rounds = iterations(o, bytes);
  std::vector<char> a(bytes, 0);
  std::vector<std::vector<char>> in(cl.is_ps() ? W : 1, std::vector<char>(bytes));
  std::vector<float> grads(cl.is_worker() ? n : 0, 0.0f), params(cl.is_worker() ? n : 0, 0.0f);
  std::vector<double> tb, td;
  PsStats ps;
  // dtrain's rounds come in blocks (the ps event loop runs until every worker sent DONE), so the
  // two alternate by block — bare, dtrain, three times — against drift of the machine's speed.
  constexpr int kBlocks = 3;
  const int per_block = std::max(2, rounds / kBlocks);
  for (int block = 0; block < kBlocks; ++block) {
    for (int i = 0; i < per_block + 1; ++i) {
      const double t = timed(cl.world(), [&] { bare_push_pull(cl, a, in); });
      if (i > 0) tb.push_back(t);
    }
    dtrain_push_pull_block(o, n, cl, per_block, grads, params, td, ps);
    MPI_Barrier(cl.world());
  }
  // The chief (world rank 0) reports.
  Row r;
  r.op = "ps_push_pull";
  r.bytes = bytes;
  r.bare_s = median(tb);
  r.dtrain_s = td.empty() ? 0 : median(td);
  const double moved = 2.0 * static_cast<double>(bytes) * W;
  r.bare_gbps = moved / r.bare_s / 1e9;
  r.dtrain_gbps = r.dtrain_s > 0 ? moved / r.dtrain_s / 1e9 : 0;
  // Every round makes one update per worker (warm-up rounds included, on both sides).
  double upd = ps.updates > 0 ? ps.optimizer_seconds * W / static_cast<double>(ps.updates) : 0;
  MPI_Allreduce(MPI_IN_PLACE, &upd, 1, MPI_DOUBLE, MPI_MAX, cl.world());  // the ps's
  r.ps_update_s = upd;
  double shared = ps.pushes > 0
                      ? static_cast<double>(ps.shared_ring_pushes) / static_cast<double>(ps.pushes)
                      : 0;
  MPI_Allreduce(MPI_IN_PLACE, &shared, 1, MPI_DOUBLE, MPI_MAX, cl.world());  // the ps's
  r.shared_ring = shared;
  return r;
}

#ifdef DTRAIN_HAVE_CUDA
/// An NCCL communicator over MPI_COMM_WORLD on the calling rank's current GPU, and a stream.
class BareNccl {
 public:
  BareNccl() {
    int rank = 0, ranks = 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &ranks);
    ncclUniqueId id{};
    if (rank == 0) check(ncclGetUniqueId(&id) == ncclSuccess, "ncclGetUniqueId");
    DT_CHECK_MPI(MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
    check(ncclCommInitRank(&comm_, ranks, id, rank) == ncclSuccess, "ncclCommInitRank");
    check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) == cudaSuccess,
          "cudaStreamCreate");
  }
  ~BareNccl() {
    if (stream_) cudaStreamDestroy(stream_);
    if (comm_) ncclCommDestroy(comm_);
  }
  BareNccl(const BareNccl&) = delete;
  BareNccl& operator=(const BareNccl&) = delete;
  void allreduce(float* data, std::size_t n) {
    check(ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm_, stream_) == ncclSuccess,
          "ncclAllReduce");
    check(cudaStreamSynchronize(stream_) == cudaSuccess, "cudaStreamSynchronize");
  }

 private:
  static void check(bool ok, const char* what) {
    if (!ok) throw LibraryError(std::string("comm_bench: ") + what + " failed");
  }
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};
#endif

/// nccl_allreduce for every size (see the file comment); returns false, with `why`, when it
/// cannot run here (no CUDA build, or fewer GPUs than ranks on some node). Collective.
bool bench_nccl(const Options& o, [[maybe_unused]] int ranks, std::FILE* json, int rank,
                std::string& why) {
  MPI_Comm node;
  DT_CHECK_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
  int local = 0, local_size = 1;
  MPI_Comm_rank(node, &local);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  const int gpus = cuda_device_count();
  int ok = gpus >= local_size ? 1 : 0, all = 0;
  DT_CHECK_MPI(MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (!all) {
    why = gpus == 0 ? cuda_unavailable_reason()
                    : "NCCL needs a GPU per rank; a node has " + std::to_string(local_size) +
                          " ranks and " + std::to_string(gpus) + " GPUs";
    return false;
  }
#ifdef DTRAIN_HAVE_CUDA
  auto be = make_cuda_backend(select_gpu_for_local_rank(local, local_size, false));
  BareNccl bare;
  auto ours = make_nccl_allreduce(MPI_COMM_WORLD, *be);
  const auto bucket = static_cast<std::size_t>(o.bucket_mb * 1024 * 1024 / sizeof(float));
  for (const std::size_t bytes : sizes(o)) {
    const std::size_t n = bytes / sizeof(float);
    DeviceBuffer<float> buf(*be, n);
    const std::vector<Bucket> buckets = plan_buckets(n, bucket);
    auto run_bare = [&] { bare.allreduce(buf.data(), n); };
    auto run_ours = [&] {
      for (const Bucket& b : buckets) ours->start_sum(buf.data() + b.begin, b.end - b.begin);
      ours->wait();
    };
    auto reset = [&] {  // repeated sums of 1/ranks stay finite
      be->fill(buf.data(), 1.0f / static_cast<float>(ranks), n);
      be->synchronize();
    };
    report(json, rank, ranks,
           alternate_allreduce("nccl_allreduce", o, bytes, ranks, reset, run_bare, run_ours));
  }
  return true;
#else
  (void)o, (void)json, (void)rank;
  why = "dtrain was built without CUDA";
  return false;
#endif
}

constexpr const char* kUsage =
    "usage: mpirun -np N dtrain_comm_bench\n"
    "         [--ops allreduce,hier_allreduce,wire_allreduce,hier_wire_allreduce,ps_push_pull,\n"
    "                nccl_allreduce]\n"
    "         [--min-bytes B (65536; whole floats: a multiple of 4)] [--max-bytes B (268435456)]\n"
    "         [--iters N (0: by size)] [--bucket-mb MB (25; 0: one bucket, at most 2047)]\n"
    "         [--ps-threads T (1)] [--ps-chunk-kb KB (1024)]\n"
    "         [--ps-shm 0|1 (1)] [--wire-dtype bf16|fp16|fp32 (bf16)] [--ranks-per-node K (0)]\n"
    "         [--out FILE (comm_bench.jsonl)]\n"
    "  (tests/benchmarks/comm_bench.sh runs it over 2..N ranks and repeats; see its header)\n";

/// A whole number >= 0 for option `k` (std::stoull alone reads "-4" as 2^64 − 4).
std::size_t count_value(const std::string& k, const std::string& v) {
  std::size_t used = 0;
  unsigned long long n = 0;
  if (!v.empty() && std::isdigit(static_cast<unsigned char>(v[0]))) {
    try {
      n = std::stoull(v, &used);
    } catch (const std::out_of_range&) {
      used = 0;
    }
  }
  if (used == 0 || used != v.size())
    throw InputError("option " + k + ": expected a whole number >= 0, got '" + v + "'");
  return static_cast<std::size_t>(n);
}

/// `v` as printf's %g writes it: "-1", "1e-05", "nan".
std::string num(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", v);
  return text;
}

/// The values together: InputError naming the option and what was expected.
void check(const Options& o) {
  // Each size sums size / 4 floats: a size not a multiple of 4 would report bytes never sent.
  if (o.min_bytes == 0 || o.min_bytes % sizeof(float) != 0)
    throw InputError("option --min-bytes: must be a multiple of 4 bytes (whole floats) > 0, got " +
                     std::to_string(o.min_bytes));
  if (o.max_bytes < o.min_bytes)
    throw InputError("option --max-bytes: must be at least --min-bytes (" +
                     std::to_string(o.min_bytes) + "), got " + std::to_string(o.max_bytes));
  // As dtrain's --bucket-mb (core/config_checks.cpp).
  if (!(o.bucket_mb >= 0 && o.bucket_mb <= 2047))
    throw InputError("option --bucket-mb: must be a size in MiB from 0 to 2047 (0: one bucket), "
                     "got " +
                     num(o.bucket_mb));
  if (o.bucket_mb > 0 && o.bucket_mb * 1048576 < sizeof(float))
    throw InputError("option --bucket-mb: " + num(o.bucket_mb) +
                     " MiB is less than one float (4 bytes = 0.0000038147 MiB); give at least "
                     "that, or 0 for one bucket");
  std::string valid;
  for (const char* op : kOps) valid += (valid.empty() ? "" : ", ") + std::string(op);
  std::size_t at = 0;
  while (at <= o.ops.size()) {
    const std::size_t comma = std::min(o.ops.find(',', at), o.ops.size());
    const std::string op = o.ops.substr(at, comma - at);
    if (std::find(std::begin(kOps), std::end(kOps), op) == std::end(kOps))
      throw InputError("option --ops: unknown op '" + op +
                       "' (expected a comma-separated list of " + valid + ")");
    at = comma + 1;
  }
  (void)parse_enum<WireDtype>(o.wire_dtype, "wire-dtype");
}

/// The options; nullopt for --help / -h (the usage is printed). InputError for an unknown option,
/// one without its value, or a value check() refuses.
std::optional<Options> parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; i += 2) {
    const std::string k = argv[i];
    if (k == "--help" || k == "-h") return std::nullopt;
    if (i + 1 >= argc) throw InputError("option " + k + " needs a value");
    const std::string v = argv[i + 1];
    if (k == "--min-bytes") o.min_bytes = count_value(k, v);
    else if (k == "--max-bytes") o.max_bytes = count_value(k, v);
    else if (k == "--bucket-mb") o.bucket_mb = std::stod(v);
    else if (k == "--iters") o.iters = std::stoi(v);
    else if (k == "--out") o.out = v;
    else if (k == "--ops") o.ops = v;
    else if (k == "--ps-threads") o.ps_threads = std::stoi(v);
    else if (k == "--ps-chunk-kb") o.ps_chunk_kb = std::stoi(v);
    else if (k == "--ps-shm") o.ps_shm = std::stoi(v) != 0;
    else if (k == "--wire-dtype") o.wire_dtype = v;
    else if (k == "--ranks-per-node") o.ranks_per_node = std::stoi(v);
    else throw InputError("unknown option " + k + " (--help lists them)");
  }
  check(o);
  return o;
}

/// The header's bucket size: "25 MiB (6553600 floats)", or "one bucket" for --bucket-mb 0.
std::string bucket_text(const Options& o) {
  if (o.bucket_mb == 0) return "one bucket (--bucket-mb 0)";
  char text[96];
  std::snprintf(text, sizeof text, "%g MiB (%zu floats)", o.bucket_mb,
                static_cast<std::size_t>(o.bucket_mb * 1024 * 1024 / sizeof(float)));
  return text;
}
}  // namespace

int main(int argc, char** argv) {
  const int rank = init_mpi(&argc, &argv);  // as dtrain does
  int ranks = 1, provided = MPI_THREAD_SINGLE;
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);
  MPI_Query_thread(&provided);
  std::optional<Options> parsed;
  try {
    parsed = parse(argc, argv);
  } catch (const std::exception& e) {  // the same on every rank: one message, exit 2
    if (rank == 0) std::fprintf(stderr, "comm_bench: error: %s\n", e.what());
    MPI_Finalize();
    return dtrain::kExitInput;
  }
  if (!parsed) {
    if (rank == 0) std::fputs(kUsage, stdout);
    MPI_Finalize();
    return 0;
  }
  try {
    const Options& o = *parsed;
    set_comm_timeout(120);
    std::FILE* json = rank == 0 ? std::fopen(o.out.c_str(), "w") : nullptr;
    if (rank == 0 && !json) throw InputError("comm_bench: cannot write " + o.out);
    if (rank == 0)
      std::printf("# comm_bench: %d ranks, MPI thread level %d, dtrain buckets %s, "
                  "ps shared rings %s\n"
                  "# %12s %12s %10s %8s %10s %8s %7s %10s\n"
                  "# %12s %12s %10s %8s %10s %8s %7s %10s\n",
                  ranks, provided, bucket_text(o).c_str(), o.ps_shm ? "on" : "off", "op", "bytes",
                  "bare us", "GB/s", "dtrain us", "GB/s", "ratio", "ps upd us", "", "", "",
                  "(busbw |", "", "bytes/s)", "", "");
    if (has_op(o, "allreduce"))
      for (const std::size_t b : sizes(o)) report(json, rank, ranks, bench_allreduce(o, b, ranks));
    if (has_op(o, "hier_allreduce")) {
      ReduceOptions how, slots;
      how.hierarchical = slots.hierarchical = true;
      how.ranks_per_node = slots.ranks_per_node = o.ranks_per_node;
      how.in_place = true;
      for (const std::size_t b : sizes(o))
        report(json, rank, ranks,
               bench_allreduce(o, b, ranks, "hier_allreduce", how, &slots, "slots_hier"));
    }
    if (has_op(o, "hier_wire_allreduce")) {
      ReduceOptions how, fp32;
      how.hierarchical = fp32.hierarchical = true;
      how.ranks_per_node = fp32.ranks_per_node = o.ranks_per_node;
      how.wire = parse_enum<WireDtype>(o.wire_dtype, "wire-dtype");
      for (const std::size_t b : sizes(o))
        report(json, rank, ranks,
               bench_allreduce(o, b, ranks, "hier_wire_allreduce", how, &fp32, "fp32_hier"));
    }
    if (has_op(o, "wire_allreduce")) {
      ReduceOptions how;
      how.wire = parse_enum<WireDtype>(o.wire_dtype, "wire-dtype");
      for (const std::size_t b : sizes(o))
        report(json, rank, ranks, bench_allreduce(o, b, ranks, "wire_allreduce", how));
    }
    if (ranks >= 2 && has_op(o, "ps_push_pull")) {
      Cluster cl(MPI_COMM_WORLD, 1);
      for (const std::size_t b : sizes(o)) {
        const Row r = bench_push_pull(o, b, cl);
        report(json, rank, ranks, r);
      }
    }
    std::string why;
    if (has_op(o, "nccl_allreduce") && !bench_nccl(o, ranks, json, rank, why) && rank == 0)
      std::printf("# nccl_allreduce skipped: %s\n", why.c_str());
    if (json) std::fclose(json);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "comm_bench: %s\n", e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return 0;
}
