// plan/plan_command.cpp — `dtrain plan`: profile (or read a profile), price the candidates,
// print the table, the recommendation and the assumptions (plan/plan_command.hpp).
#include "dtrain/plan/plan_command.hpp"

#include <mpi.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/comm/guard.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/core/files.hpp"
#include "dtrain/dnn/float16.hpp"      // wire_bytes: 4 or 2 bytes a value with --wire-dtype
#include "dtrain/model/model.hpp"      // layer_key, parse_layer_spec: the job's layers by name
#include "dtrain/optim/optimizer.hpp"  // is_layerwise: --num-ps bounded by tensors
#include "dtrain/plan/profiler.hpp"
#include "dtrain/plan/scaling_model.hpp"

namespace dtrain {
namespace {

/// What the model leaves out, printed under every plan (docs/scaling/README.md).
constexpr const char* kAssumptions =
    "assumptions (docs/scaling/README.md):\n"
    "- compute per worker: the profile's per-layer times scaled linearly to the per-worker batch;\n"
    "  no slowdown from ranks sharing a host's memory bandwidth or caches, data loading hidden,\n"
    "  steady state (no warm-up step); stragglers only as --straggler-cv σ: each worker's\n"
    "  forward + backward normal and independent from step to step, a sync step waiting for the\n"
    "  slowest of W (+σ·E[max of W standard normals] × compute); no worker slower every step\n"
    "- links: alpha-beta, latency + bytes / bandwidth (the presets' figures are nominal)\n"
    "- sync: flat = one ring over all workers; hierarchical = each rank sums its share of the\n"
    "  node in place in shared memory, a ring of node leaders, the others copy the result out;\n"
    "  buckets reduced one at a time in order, overlapped with backward\n"
    "- async: each worker pushes and pulls every gradient byte during backward, K ps serve 1/K\n"
    "  each and apply the update (the profile's optimizer time / K); the slower of worker and ps\n"
    "  paces the step; async samples/s is not time to accuracy (stale gradients)\n"
    "- latency-aware rows (--bucket-link): buckets of at least p·α·β bytes for the ring of all\n"
    "  p workers over --network (--intra-node on one node)\n"
    "- --cores-per-node C (CPU workers): a step takes at least the node's CPU work over its C\n"
    "  cores: its workers' compute × threads, the copies through a shared intra-node link\n"
    "  (they take as long on the CPU as on the bus) and its ps ranks' updates (bound \"cores\")\n"
    "- --wire-dtype bf16|fp16: the sync allreduce moves 2 bytes a value (flat, and both levels\n"
    "  of hierarchical); not modelled: sync through ps, 16-bit ps pushes, the conversions' "
    "compute\n";

/// The planned cluster, with every option checked.
Topology topology_of(const Config& c) {
  DT_REQUIRE(c.nodes >= 1, "option --nodes: must be >= 1, got " + std::to_string(c.nodes));
  DT_REQUIRE(c.workers_per_node >= 1,
             "option --workers-per-node: must be >= 1, got " + std::to_string(c.workers_per_node));
  // Beyond any machine, and where the step's int arithmetic (W × batch) would wrap.
  constexpr std::int64_t kMaxWorkers = 1 << 20;
  DT_REQUIRE(static_cast<std::int64_t>(c.nodes) * c.workers_per_node <= kMaxWorkers,
             "options --nodes " + std::to_string(c.nodes) + " × --workers-per-node " +
                 std::to_string(c.workers_per_node) + ": at most " + std::to_string(kMaxWorkers) +
                 " workers can be planned");
  // Only the command line's --mode and --num-ps restrict the plan (a job file's are the job's:
  // the plan compares every mode and ps count).
  DT_REQUIRE(!(c.num_ps.automatic && c.plan_num_ps_given),
             "dtrain plan: --num-ps auto picks K for a training run; the plan compares ps counts "
             "itself (--num-ps K plans that one)");
  DT_REQUIRE(!(c.mode == Mode::sync && c.plan_mode_given && c.num_ps > 0 && c.plan_num_ps_given),
             "dtrain plan: --mode sync --num-ps " + std::to_string(c.num_ps) +
                 " (sync through parameter servers) is not modelled; plan --mode sync (allreduce) "
                 "or --mode async --num-ps K");
  DT_REQUIRE(c.pipeline_stages == 1,
             "dtrain plan: --pipeline-stages " + std::to_string(c.pipeline_stages) +
                 " (model parallelism) is not modelled: the plan prices data parallelism, every "
                 "worker the whole model; plan the job without it");
  DT_REQUIRE(c.max_staleness < 0,
             "dtrain plan: --max-staleness " + std::to_string(c.max_staleness) +
                 " (SSP) is not modelled: the async rows price unbounded async; plan the job "
                 "without it");
  DT_REQUIRE(c.cores_per_node >= 0, "option --cores-per-node: must be >= 0 (0: not priced), got " +
                                        std::to_string(c.cores_per_node));
  Topology t;
  t.nodes = c.nodes;
  t.workers_per_node = c.workers_per_node;
  t.cores_per_node = c.cores_per_node;
  t.step_cv = c.straggler_cv;
  t.inter = parse_link(c.network, "--network");
  t.intra = parse_link(c.intra_node, "--intra-node");
  t.overlap = c.overlap;
  t.value_bytes = static_cast<double>(wire_bytes(c.wire_dtype));
  const int W = t.workers();
  if (c.global_batch_size > 0) {
    DT_REQUIRE(c.global_batch_size % W == 0,
               "option --global-batch-size: " + std::to_string(c.global_batch_size) +
                   " does not split evenly over " + std::to_string(W) + " workers (--nodes " +
                   std::to_string(c.nodes) + " × --workers-per-node " +
                   std::to_string(c.workers_per_node) + ")");
    t.batch = c.global_batch_size / W;
  } else {
    t.batch = c.batch_size;
  }
  return t;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

/// A bucket size in MiB as the shortest text that reads back as it (0.3, 25): rounding it would
/// recommend another size (0.3 printed as 0 means one bucket).
std::string mib_text(double v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  return {buf, r.ptr};
}

std::string link_text(const Link& l) {
  return l.name + " (α " + fixed(l.alpha_us, 1) + " µs, β " + fixed(l.beta_gbps, 1) + " Gb/s" +
         (l.shared ? ", shared by the node's ranks)" : ")");
}

/// Whether dtrain can run the candidate on the profile's device: --allreduce hierarchical is
/// for CPU workers (GPU workers take NCCL's rings).
bool runnable(const Candidate& c, const WorkerProfile& p) {
  return c.strategy != Strategy::hierarchical || p.on_cpu();
}

/// The options that run a candidate (GPU workers: NCCL for the flat ring; latency-aware: the
/// --bucket-link that plans its buckets, the link bucket_ring() takes).
std::string options_of(const Candidate& c, const WorkerProfile& p, const Topology& t) {
  if (c.strategy == Strategy::ps) return "--mode async --num-ps " + std::to_string(c.num_ps);
  const std::string flat = p.on_cpu() ? "mpi" : "nccl";
  return "--mode sync --num-ps 0 --allreduce " +
         (c.strategy == Strategy::flat ? flat : std::string("hierarchical")) + " --bucket-mb " +
         mib_text(c.bucket_mb) +
         (c.latency_aware ? " --bucket-link " + (t.nodes > 1 ? t.inter : t.intra).name : "");
}

/// The profile: --profile's, or measured now at the planned per-worker batch (then saved to
/// --save-profile if given).
WorkerProfile obtain_profile(const Config& c, const Topology& t, std::string& origin) {
  if (!c.profile.empty()) {
    origin = "from " + c.profile;
    WorkerProfile p = load_profile(c.profile, "--profile");
    std::vector<std::string> keys;  // the job's layers, as the profile names them
    for (std::size_t i = 0; i < c.layers.size(); ++i) {
      const LayerSpec s = parse_layer_spec(c.layers[i]);
      keys.push_back(layer_key(i, s.type, s.name));
    }
    require_profile_of(p, keys, "--profile " + c.profile);
    // The layers' parameter counts need the input's shape: checked where the job's input is here
    // (a profile is often priced for a job whose data lives on the cluster only).
    if (!c.synthetic.empty() || (!c.train_data.empty() && std::filesystem::exists(c.train_data)))
      require_profile_params(p, job_layers(c), "--profile " + c.profile);
    else origin += " (its parameter counts unchecked: the job's input is not here)";
    return p;
  }
  DT_REQUIRE(!c.synthetic.empty() || !c.train_data.empty(),
             "dtrain plan: the profiling run needs the job's input: give --synthetic "
             "CxHxW:classes or --train-data (or a saved --profile)");
  if (!c.save_profile.empty()) require_new_file(c.save_profile, "--save-profile");
  const Cluster cluster(MPI_COMM_WORLD, 0);
  Config worker = c;  // --threads 0: a worker's share of this node's cores, as training gives it
  if (worker.threads == 0)
    worker.threads = std::max(1, cluster.node_cpus() / std::max(1, c.workers_per_node));
  WorkerProfile p = profile_worker(worker, cluster, t.batch, c.plan_steps);
  origin = "measured now (" + std::to_string(p.steps) + " steps after a warm-up)";
  if (!c.save_profile.empty()) save_profile(p, c.save_profile, "--save-profile");
  return p;
}

/// The most ps a training run of the profiled model takes (ps/sharding.hpp): one float each, or
/// with a layer-wise optimizer (LARS, LAMB) whole tensors, at least one per layer with
/// parameters. The ps counts the plan tries stay within it (an explicit --num-ps is priced as
/// given).
int max_num_ps(const Config& c, const WorkerProfile& p) {
  std::size_t most = p.param_floats();
  if (is_layerwise(c.optimizer))
    most = static_cast<std::size_t>(std::count_if(
        p.layers.begin(), p.layers.end(), [](const LayerCost& l) { return l.param_floats > 0; }));
  return static_cast<int>(std::min<std::size_t>(most, std::numeric_limits<int>::max()));
}

std::string header(const Config& c, const Topology& t, const WorkerProfile& p,
                   const std::string& origin) {
  std::ostringstream os;
  os << "dtrain plan: " << (c.config_file.empty() ? "the job" : c.config_file) << " on " << t.nodes
     << " node(s) × " << t.workers_per_node << " worker(s) = " << t.workers() << " workers, "
     << t.batch << " samples per worker and step (global batch "
     << static_cast<std::int64_t>(t.batch) * t.workers() << ")\n"
     << "profile: " << origin << ", " << p.device << ", " << p.threads << " thread(s), "
     << p.precision << ", batch " << p.batch << ": forward " << fixed(p.forward_ms(), 1)
     << " ms, backward " << fixed(p.backward_ms(), 1) << " ms, optimizer "
     << fixed(p.optimizer_ms, 1) << " ms; " << p.param_floats()
     << " parameters = " << fixed(p.gradient_bytes() / 1e6, 1) << " MB of gradients, "
     << p.layers.size() << " layers\n"
     << "links: between nodes " << link_text(t.inter) << "; inside a node " << link_text(t.intra)
     << (t.overlap ? "" : "; --overlap false: the exchange starts after backward")
     << (t.cores_per_node > 0 ? "; " + std::to_string(t.cores_per_node) + " cores per node"
                              : std::string())
     << (t.step_cv > 0 ? "; step times ±" + fixed(100 * t.step_cv, 1) + " % (σ), the slowest of " +
                             std::to_string(t.workers()) + " " +
                             fixed(100 * t.step_cv * expected_max_normal(t.workers()), 1) +
                             " % above the mean"
                       : std::string())
     << "\n\n";
  return os.str();
}

std::string table(const std::vector<Prediction>& rows) {
  std::ostringstream os;
  os << "| configuration | bucket MiB | buckets | compute ms | straggler wait ms | "
        "exposed comm ms | optimizer ms | step ms | samples/s | efficiency | bound |\n"
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n";
  for (const Prediction& r : rows) {
    const bool ps = r.candidate.strategy == Strategy::ps;
    os << "| " << describe(r.candidate) << " | " << (ps ? "-" : mib_text(r.candidate.bucket_mb))
       << " | " << (ps ? "-" : std::to_string(r.buckets) + ", last " + fixed(r.end_mib, 2) + " MiB")
       << " | " << fixed(r.compute_ms, 1) << " | " << fixed(r.straggler_ms, 1) << " | "
       << fixed(r.exposed_ms, 1) << " | " << fixed(r.optimizer_ms, 1) << " | "
       << fixed(r.step_ms, 1) << " | " << fixed(r.samples_per_s, 2) << " | "
       << fixed(r.efficiency, 3) << " | " << r.bound << " |\n";
  }
  return os.str();
}

/// The best prediction of `rows` whose strategy passes `keep` (nullptr when none does): of the
/// rows within 0.1 % of the fastest, the first with the job's own bucket size, else the first.
/// (Measured against the fastest, not pairwise, so the pick does not depend on the row order.)
template <typename Keep>
const Prediction* best(const std::vector<Prediction>& rows, double job_bucket_mb, Keep keep) {
  double fastest = -1;
  for (const Prediction& r : rows)
    if (keep(r)) fastest = std::max(fastest, r.samples_per_s);
  const Prediction* b = nullptr;
  for (const Prediction& r : rows) {
    if (!keep(r) || r.samples_per_s < fastest * 0.999) continue;
    if (r.candidate.bucket_mb == job_bucket_mb) return &r;
    if (!b) b = &r;
  }
  return b;
}

/// The rows the plan recommends: the fastest runnable one, the fastest sync (allreduce) and the
/// fastest async (ps) one, each nullptr when no row qualifies.
struct Picks {
  const Prediction* recommended = nullptr;
  const Prediction* sync = nullptr;
  const Prediction* async = nullptr;
};

Picks pick(const std::vector<Prediction>& rows, const WorkerProfile& p, double job_bucket_mb) {
  const auto sync = [&](const Prediction& r) {
    return r.candidate.strategy != Strategy::ps && runnable(r.candidate, p);
  };
  const auto async = [](const Prediction& r) { return r.candidate.strategy == Strategy::ps; };
  return {best(rows, job_bucket_mb, [&](const Prediction& r) { return sync(r) || async(r); }),
          best(rows, job_bucket_mb, sync), best(rows, job_bucket_mb, async)};
}

std::string recommendation(const std::vector<Prediction>& rows, const WorkerProfile& p,
                           const Topology& t, double job_bucket_mb) {
  std::ostringstream os;
  const auto line = [&](const char* what, const Prediction* r) {
    if (r)
      os << what << options_of(r->candidate, p, t) << "  (" << fixed(r->samples_per_s, 2)
         << " samples/s, efficiency " << fixed(r->efficiency, 3) << ")\n";
  };
  const Picks best_rows = pick(rows, p, job_bucket_mb);
  line("recommended: ", best_rows.recommended);
  line("best sync:   ", best_rows.sync);
  line("best async:  ", best_rows.async);
  if (!p.on_cpu())
    os << "(hierarchical rows: the model's figure only; dtrain's GPU workers reduce with NCCL)\n";
  return os.str();
}

nlohmann::ordered_json plan_json(const Topology& t, const WorkerProfile& p,
                                 const std::vector<Prediction>& rows, double job_bucket_mb) {
  nlohmann::ordered_json j = {{"nodes", t.nodes},
                              {"workers_per_node", t.workers_per_node},
                              {"workers", t.workers()},
                              {"batch_per_worker", t.batch},
                              {"network", t.inter.name},
                              {"intra_node", t.intra.name},
                              {"cores_per_node", t.cores_per_node},
                              {"straggler_cv", t.step_cv},
                              {"gradient_bytes", p.gradient_bytes()}};
  j["predictions"] = nlohmann::ordered_json::array();
  for (const Prediction& r : rows)
    j["predictions"].push_back({{"configuration", describe(r.candidate)},
                                {"options", options_of(r.candidate, p, t)},
                                {"latency_aware", r.candidate.latency_aware},
                                {"buckets", r.buckets},
                                {"last_bucket_mib", r.end_mib},
                                {"runnable", runnable(r.candidate, p)},
                                {"bucket_mb", r.candidate.bucket_mb},
                                {"num_ps", r.candidate.num_ps},
                                {"compute_ms", r.compute_ms},
                                {"straggler_ms", r.straggler_ms},
                                {"exposed_comm_ms", r.exposed_ms},
                                {"optimizer_ms", r.optimizer_ms},
                                {"step_ms", r.step_ms},
                                {"samples_per_s", r.samples_per_s},
                                {"efficiency", r.efficiency},
                                {"node_cpu_ms", r.node_cpu_ms},
                                {"bound", r.bound}});
  // The printed recommendation: the row (an index into "predictions") and its options, or null.
  const auto chosen = [&](const Prediction* r) -> nlohmann::ordered_json {
    if (r == nullptr) return nullptr;
    return {{"prediction", r - rows.data()}, {"options", options_of(r->candidate, p, t)}};
  };
  const Picks best_rows = pick(rows, p, job_bucket_mb);
  j["recommended"] = chosen(best_rows.recommended);
  j["best_sync"] = chosen(best_rows.sync);
  j["best_async"] = chosen(best_rows.async);
  return j;
}

}  // namespace

int run_plan(const Config& c) {
  Topology t;
  WorkerProfile p;
  std::vector<Prediction> rows;
  std::string origin;
  all_or_nothing(MPI_COMM_WORLD, [&] {
    int size = 0;
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    DT_REQUIRE(size == 1, "dtrain plan runs as one process (it plans for --nodes × "
                          "--workers-per-node workers; run it without mpirun -np " +
                              std::to_string(size) + ")");
    t = topology_of(c);
    if (!c.out.empty()) require_new_file(c.out, "--out");
    p = obtain_profile(c, t, origin);
    const bool sync = !c.plan_mode_given || c.mode == Mode::sync;
    const bool async = !c.plan_mode_given || c.mode == Mode::async;
    const int most_ps = max_num_ps(c, p);
    for (const Candidate& k : candidates(p, t, sync, async, c.bucket_mb, c.num_ps))
      if (k.strategy != Strategy::ps ||
          (c.plan_num_ps_given ? k.num_ps == c.num_ps : k.num_ps <= most_ps))
        rows.push_back(predict(p, t, k));
    if (!c.out.empty()) {
      // The profile's job path, bytes on Linux: one not in UTF-8 reads as U+FFFD.
      const std::string text = plan_json(t, p, rows, c.bucket_mb)
                                   .dump(1, ' ', false, nlohmann::json::error_handler_t::replace) +
                               '\n';
      try {
        create_new_file(c.out, [&](std::ostream& out) { out << text; });
      } catch (const LibraryError& e) {  // a full disk stays a system failure (exit 3)
        throw LibraryError("option --out '" + c.out + "': cannot write the plan: " + e.what());
      }
    }
  });
  std::cout << header(c, t, p, origin) << table(rows) << '\n'
            << recommendation(rows, p, t, c.bucket_mb) << '\n'
            << kAssumptions;
  return 0;
}

}  // namespace dtrain
