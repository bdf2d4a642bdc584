// tests/mpi/test_ps.cpp — parameter-server correctness on MPI_COMM_WORLD: run_parameter_server on
// the ps ranks, PsClient on the workers. Workers push rank-seeded closed-form gradients one at a
// time in a fixed global order (token passing with a barrier on the worker communicator), so the
// result must equal applying the same gradients serially with an in-process Optimizer on the CPU
// backend: every reply and the final pull, for momentum and Adam (with warm-up + cosine), LARS and
// LAMB (shards of whole tensors, each push applied whole), with 1 ps and with 2 ps (W ≥ 3), in one
// chunk per part and in 1 KiB chunks (ps/protocol.hpp). Also: global_step counting, the --max-steps
// cap (later pushes not applied), SNAPSHOT returning params + m + v, concurrent pushes none of
// which is lost, pushes issued in pieces (begin_push / push_ready / finish_push: serially equal,
// and interleaved at the ps none lost), a reply that survives a worker slow to receive it (the ring
// slots it leaves from), and DONE ending every server. The aggregating rules (sync through the ps,
// bounded staleness 0): one update per step, the samples-weighted mean, replies held until it;
// backup workers' late pushes dropped. With a 16-bit --wire-dtype, every rule applies exactly the
// gradients rounded once to 16 bits.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/mpi_world.hpp"
#include "common/tensor_table.hpp"
#include "dtrain/comm/cluster.hpp"
#include "dtrain/core/config.hpp"
#include "dtrain/dnn/float16.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/optim/dana.hpp"
#include "dtrain/optim/optimizer.hpp"
#include "dtrain/ps/client.hpp"
#include "dtrain/ps/protocol.hpp"
#include "dtrain/ps/server.hpp"
#include "dtrain/ps/sharding.hpp"

namespace dtrain {
namespace {

using test::world_size;

// Odd, so two shards differ in size; in 1 KiB chunks (256 floats) 10 per shard with 1 ps and 5
// with 2, more than the ps's ring of async receive buffers (kRingSlots, 4), which then wraps.
constexpr std::size_t kParams = 2503;

std::vector<float> initial_params() {
  std::vector<float> p(kParams);
  for (std::size_t i = 0; i < kParams; ++i)
    p[i] = 0.5f * std::sin(0.1f * static_cast<float>(i)) + 0.01f;
  return p;
}

/// The model's tensors as LARS and LAMB see them (kParams floats): a weight too large to share a ps
/// with the next one, biases and batchnorm parameters (no trust ratio), a second weight.
std::vector<TensorInfo> tensors() {
  return test::tensor_table({{"0.conv.weight", 1200},
                             {"0.conv.bias", 3},
                             {"1.batchnorm.gamma", 100},
                             {"1.batchnorm.beta", 100},
                             {"2.dense.weight", 1000},
                             {"2.dense.bias", 100}});
}

/// The gradient worker w pushes in its round r: closed form, different for every (w, r, i).
std::vector<float> gradient(int w, int r) {
  std::vector<float> g(kParams);
  for (std::size_t i = 0; i < kParams; ++i)
    g[i] =
        static_cast<float>((w + 1) * std::cos(0.37 * static_cast<double>(i) + 1.3 * w + 0.71 * r)) +
        0.05f * static_cast<float>(r % 3);
  return g;
}

/// What one server run reports to every rank (summed over ps ranks).
struct ServedStats {
  std::int64_t pushes = 0, ignored = 0, shared_ring_pushes = 0, dropped = 0;
};

/// Runs the servers on the ps ranks and `worker_body` on the workers, then shares the ps statistics
/// with every rank. Every rank must call it (it ends with a world collective).
template <typename Body>
ServedStats serve(const Cluster& cluster, const Config& cfg, std::int64_t total_steps,
                  Body worker_body, std::size_t params = kParams) {
  std::int64_t mine[4] = {0, 0, 0, 0};
  if (cluster.is_ps()) {
    std::atomic<bool> stop{false};
    try {
      // LARS, LAMB: shards of whole tensors, each ps given its own (as train/trainer.cpp does).
      const bool layerwise = is_layerwise(cfg.optimizer);
      const auto shards = layerwise ? ps_shard_ranges(cfg, tensors(), params, cluster.num_ps())
                                    : shard_ranges(params, cluster.num_ps());
      const ShardRange& shard = shards[cluster.me().index];
      ShardTensors own;
      if (layerwise) own.segments = param_segments(tensors(), params, shard.begin, shard.end);
      const PsStats st = run_parameter_server(cluster, cfg, shard, total_steps, stop, own);
      mine[0] = st.pushes;
      mine[1] = st.ignored;
      mine[2] = st.shared_ring_pushes;
      mine[3] = st.dropped;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "parameter server threw: " << e.what();
    }
  } else {
    try {
      worker_body();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "worker threw: " << e.what();
    }
  }
  std::int64_t sum[4] = {0, 0, 0, 0};
  MPI_Allreduce(mine, sum, 4, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD);
  return {sum[0], sum[1], sum[2], sum[3]};
}

/// Relative+absolute closeness of two float vectors; reports the first mismatch.
void expect_close(const std::vector<float>& got, const std::vector<float>& want,
                  const std::string& what, float tol = 1e-6f) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!(std::fabs(got[i] - want[i]) <= tol * std::max(1.0f, std::fabs(want[i])))) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", expected " << want[i];
      return;
    }
  }
}

Config ps_config(const std::string& optimizer) {
  Config c;
  c.mode = Mode::async;
  c.optimizer = parse_enum<OptimizerKind>(optimizer, "optimizer");
  c.lr = optimizer == "adam" || optimizer == "lamb" ? 0.01f : 0.05f;
  c.momentum = 0.9f;
  c.weight_decay = 1e-3f;
  c.timeout = 60.0;
  c.async_momentum = AsyncMomentum::lr_scaled;  // Downpour's one momentum (DANA: its own case)
  c.lars_eta = 0.02f;
  if (optimizer == "adam" || optimizer == "lamb") {
    c.lr_schedule = LrSchedule::cosine;
    c.warmup_steps = 3;
    c.lr_min = 0.001f;
  }
  return c;
}

struct SerialCase {
  int num_ps = 1;
  std::string optimizer = "momentum";
  int rounds = 4;
  std::int64_t max_steps = 0;  // 0: none
  int chunk_kb = 1024;         // --ps-chunk-kb; 1: 256-float chunks, several per shard
  bool dana = false;           // --async-momentum dana: a push's reply is the look-ahead θ̂
  bool issued = false;         // pushes issued in pieces (begin_push / push_ready / finish_push)
  bool shm = true;             // --ps-shm: async pushes through the ring a ps shares with its node
  WireDtype wire = WireDtype::fp32;  // --wire-dtype: the pushes' format on the wire
  bool stale_lr = false;             // --stale-lr inverse: a push τ > 1 steps stale at lr/τ
};

/// g as a ps receives it over `wire`: rounded once to 16 bits and widened back (fp32: as it is).
std::vector<float> on_wire(WireDtype wire, std::vector<float> g) {
  if (wire == WireDtype::fp32) return g;
  std::vector<std::uint16_t> e(g.size());
  encode_wire(wire, g.data(), e.data(), g.size());
  decode_wire(wire, e.data(), g.data(), g.size());
  return g;
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float d = 0.0f;
  for (std::size_t i = 0; i < a.size(); ++i) d = std::max(d, std::fabs(a[i] - b[i]));
  return d;
}

/// DTRAIN_TEST_PS_REMOTE=1 (mpi_tests_np3_ps_remote): the ps count every worker as remote.
bool all_remote() {
  const char* v = std::getenv("DTRAIN_TEST_PS_REMOTE");
  return v != nullptr && std::string(v) == "1";
}

/// One push of `g` through `client`, whole (push_pull) or issued in pieces as backward would
/// hand them over: from the end of the buffer down, in uneven steps.
PushResult push(PsClient& client, const std::vector<float>& g, int samples,
                std::vector<float>& params, bool issued) {
  if (!issued) return client.push_pull(g.data(), samples, params.data(), false);
  client.begin_push(g.data(), samples, params.data(), false);
  for (std::size_t from :
       {kParams - 1, kParams * 3 / 4, kParams * 3 / 4, kParams / 2 + 7, kParams / 5})
    client.push_ready(from);
  return client.finish_push();
}

/// The pushes of a serial case applied one by one in the global order with an in-process optimizer
/// (or DANA) on the CPU backend: the reply each push must get, the final θ, and the m and v a
/// snapshot must return.
struct SerialReference {
  std::vector<std::vector<float>> after;  ///< reference reply to each push
  std::vector<float> params, m, v;

  SerialReference(const Config& cfg, bool with_dana, int workers, std::int64_t pushes,
                  std::int64_t applied, std::int64_t total_steps)
      : params(initial_params()), m(kParams), v(kParams, 0.0f) {
    auto cpu = make_cpu_backend();
    Optimizer opt(cfg, *cpu, kParams, total_steps, {},
                  is_layerwise(cfg.optimizer) ? param_segments(tensors(), kParams)
                                              : std::vector<ParamSegment>{});
    opt.use_async_momentum(workers);
    std::optional<DanaMomentum> dana;
    if (with_dana) {
      dana.emplace(cfg, *cpu, kParams, workers, total_steps);
      dana->load(std::vector<float>(kParams, 0.0f).data(), params.data(), 0);
    }
    std::vector<std::int64_t> seen(workers, 0);  // each worker's step of its last reply
    for (std::int64_t t = 0; t < pushes; ++t) {
      const int w = static_cast<int>(t % workers);
      std::vector<float> g = on_wire(cfg.wire_dtype, gradient(w, static_cast<int>(t / workers)));
      // --stale-lr inverse, τ = t − seen: momentum's gradient / τ, the others' learning rate.
      const std::int64_t tau = t - seen[w];
      seen[w] = std::min(t + 1, applied);
      float lr_scale = cfg.stale_lr == StaleLr::inverse && tau > 1 ? 1.0f / tau : 1.0f;
      if (cfg.optimizer == OptimizerKind::momentum) {
        for (float& x : g) x *= lr_scale;
        lr_scale = 1.0f;
      }
      if (t < applied && with_dana) {
        dana->apply(w, params.data(), g.data(), t, 0, kParams);
        after.emplace_back(dana->look_ahead(), dana->look_ahead() + kParams);
        continue;
      }
      if (t < applied) opt.apply(params.data(), g.data(), t, lr_scale);
      after.push_back(params);  // a push past --max-steps is answered with θ
    }
    const float* m_dev = with_dana ? dana->momentum_sum() : opt.m();
    cpu->copy_to_host(m.data(), m_dev, kParams * sizeof(float));
    if (opt.v()) cpu->copy_to_host(v.data(), opt.v(), kParams * sizeof(float));
  }
};

/// How far serial case k's final θ with its 16-bit wire (cfg) lies from the fp32 wire's.
float rounding_shift(const Config& cfg, const SerialCase& k, int workers, std::int64_t applied,
                     std::int64_t total_steps) {
  Config fp32 = cfg;
  fp32.wire_dtype = WireDtype::fp32;
  return max_abs_diff(
      SerialReference(fp32, k.dana, workers, total_steps, applied, total_steps).params,
      SerialReference(cfg, k.dana, workers, total_steps, applied, total_steps).params);
}

/// Workers push in the global order (round r, worker 0..n−1); checks every reply, the final pull
/// and a snapshot against the serial reference, and the servers' counts.
void run_serial_case(const SerialCase& k) {
  const int W = world_size();
  if (k.num_ps >= W) GTEST_SKIP() << k.num_ps << " ps need more than " << W << " ranks";
  Cluster cluster(MPI_COMM_WORLD, k.num_ps);
  const int workers = cluster.num_workers();
  const std::int64_t pushes = static_cast<std::int64_t>(k.rounds) * workers;
  const std::int64_t applied = k.max_steps > 0 ? std::min(pushes, k.max_steps) : pushes;
  const std::int64_t total_steps = pushes;  // sizes the cosine schedule on both sides
  Config cfg = ps_config(k.optimizer);
  cfg.max_steps = k.max_steps;
  cfg.ps_chunk_kb = k.chunk_kb;
  if (k.dana) cfg.async_momentum = AsyncMomentum::dana;
  cfg.ps_shm = k.shm;
  cfg.wire_dtype = k.wire;
  if (k.stale_lr) cfg.stale_lr = StaleLr::inverse;
  // Every push after the first reply goes through the shared ring (one node, --ps-shm), else none;
  // LARS, LAMB: none (a push applied whole is received whole).
  const bool layerwise = is_layerwise(cfg.optimizer);
  const std::int64_t shared = k.shm && !all_remote() && !layerwise ? pushes * cluster.num_ps() : 0;
  if (k.wire != WireDtype::fp32)  // the rounding shows: ten times expect_close's tolerance
    EXPECT_GT(rounding_shift(cfg, k, workers, applied, total_steps), 1e-5f);

  const ServedStats st = serve(cluster, cfg, total_steps, [&] {
    // The ps runs the optimizer with the momentum --async-momentum (lr-scaled) gives W workers:
    // μ − (1 − 1/W)·lr(step)/lr.
    for (std::int64_t t : {std::int64_t{0}, pushes / 2, pushes - 1})
      if (!k.dana)
        EXPECT_NEAR(ps_momentum(cfg, workers, t, total_steps),
                    std::max(0.0f, cfg.momentum - (1.0f - 1.0f / workers) *
                                                      learning_rate(cfg, t, total_steps) / cfg.lr),
                    1e-6f);
    const SerialReference ref(cfg, k.dana, workers, pushes, applied, total_steps);  // every worker

    PsClient client(cluster, ps_shard_ranges(cfg, tensors(), kParams, cluster.num_ps()), 60.0,
                    static_cast<std::size_t>(k.chunk_kb) * 1024, k.wire);
    const int me = cluster.me().index;
    MPI_Comm wc = cluster.role_comm();
    if (cluster.is_chief()) {
      const auto init = initial_params();
      client.load(init.data(), nullptr, nullptr, 0, k.max_steps);
    }
    MPI_Barrier(wc);
    std::vector<float> params(kParams, -1.0f);
    const PushResult first = client.pull(params.data());
    EXPECT_EQ(first.global_step, 0);
    EXPECT_EQ(params, initial_params()) << "pull after LOAD must return the loaded parameters";
    MPI_Barrier(wc);
    for (int r = 0; r < k.rounds; ++r) {
      for (int w = 0; w < workers; ++w) {
        if (w == me) {
          const std::int64_t t = static_cast<std::int64_t>(r) * workers + w;
          const PushResult res = push(client, gradient(w, r), 8, params, k.issued);
          EXPECT_EQ(res.global_step, std::min(t + 1, applied)) << "push " << t;
          EXPECT_FALSE(res.stop_requested);
          expect_close(params, ref.after[t], "reply to push " + std::to_string(t));
        }
        MPI_Barrier(wc);  // pass the token
      }
    }
    const PushResult last = client.pull(params.data());
    EXPECT_EQ(last.global_step, applied);
    expect_close(params, ref.params, "final pull");  // a pull returns θ (DANA too)
    if (cluster.is_chief()) {
      std::vector<float> p(kParams, -1.0f), m(kParams, -1.0f), v(kParams, -1.0f);
      EXPECT_EQ(client.snapshot(p.data(), m.data(), v.data()), applied);
      expect_close(p, ref.params, "snapshot params");
      expect_close(m, ref.m, "snapshot m");
      expect_close(v, ref.v, "snapshot v");  // zeros for momentum
      EXPECT_TRUE(std::any_of(m.begin(), m.end(), [](float x) { return x != 0.0f; }));
    }
    EXPECT_EQ(client.shared_ring_pushes(), shared / workers);
    // A shared ring slot holds 4 bytes a value; MPI messages the wire's 4 or 2.
    EXPECT_EQ(client.pushed_bytes(),
              static_cast<std::int64_t>(k.rounds * kParams * (shared ? 4 : wire_bytes(k.wire))));
    client.done();
  });
  EXPECT_EQ(st.pushes, applied * cluster.num_ps()) << "every ps counts every applied push";
  EXPECT_EQ(st.ignored, (pushes - applied) * cluster.num_ps());
  EXPECT_EQ(st.shared_ring_pushes, shared) << "pushes through a shared ring, over all ps";
}

TEST(ParameterServer, MomentumOnePsEqualsSerialApplication) {
  run_serial_case({1, "momentum", 4, 0});
}
TEST(ParameterServer, AdamOnePsEqualsSerialApplication) { run_serial_case({1, "adam", 4, 0}); }
TEST(ParameterServer, MomentumTwoPsEqualsSerialApplication) {
  run_serial_case({2, "momentum", 4, 0});
}
TEST(ParameterServer, AdamTwoPsEqualsSerialApplication) { run_serial_case({2, "adam", 3, 0}); }
// The pipelined path: each push updated and answered chunk by chunk (chunks of 256 floats, the
// last partial; received through the ps's ring of chunk buffers, reused as they are applied),
// LOAD and SNAPSHOT parts chunked too.
// LARS and LAMB: shards of whole tensors (tensor_shard_ranges), each push received whole and
// applied at once, answered with the shard's new parameters; pushes issued in pieces, in 1 KiB
// chunks, past --max-steps, over a 16-bit wire.
TEST(ParameterServer, LarsTwoPsInChunksEqualsSerialApplication) {
  run_serial_case({2, "lars", 4, 0, 1});
}
TEST(ParameterServer, LambOnePsIssuedPushesPastMaxStepsEqualSerialApplication) {
  run_serial_case({1, "lamb", 4, 5, 1, false, true});
}
TEST(ParameterServer, LarsBf16WireTwoPsEqualsSerialApplicationOfRoundedGradients) {
  run_serial_case({2, "lars", 3, 0, 1024, false, true, true, WireDtype::bf16});
}
TEST(ParameterServer, MomentumOnePsInChunksEqualsSerialApplication) {
  run_serial_case({1, "momentum", 4, 0, 1});
}
TEST(ParameterServer, AdamTwoPsInChunksEqualsSerialApplication) {
  run_serial_case({2, "adam", 3, 0, 1});
}
// DANA: per-worker momentum, replies at the look-ahead position, the snapshot's m the momentum sum.
TEST(ParameterServer, DanaOnePsEqualsSerialApplication) {
  run_serial_case({1, "momentum", 4, 0, 1024, true});
}
TEST(ParameterServer, DanaTwoPsInChunksEqualsSerialApplication) {
  run_serial_case({2, "momentum", 4, 0, 1, true});
}
TEST(ParameterServer, IssuedPushesEqualSerialApplication) {
  run_serial_case({1, "momentum", 4, 0, 1024, false, true});
}
TEST(ParameterServer, IssuedPushesInChunksEqualSerialApplication) {
  run_serial_case({2, "adam", 3, 0, 1, false, true});  // several chunks per shard, sent in pieces
}
TEST(ParameterServer, IssuedDanaPushesPastMaxStepsEqualSerialApplication) {
  run_serial_case({1, "momentum", 4, 5, 1, true, true});
}
// --stale-lr inverse (staleness-aware SGD, Zhang et al. 2016): with 3 workers (np 4) every push
// after the first round is 2 steps stale and applied at lr/2 — Adam and LARS through their learning
// rate (a gradient divided by τ they would normalize away), momentum through its gradient.
SerialCase stale_lr_case(int num_ps, const char* optimizer, int chunk_kb) {
  SerialCase k{num_ps, optimizer, 4, 0, chunk_kb};
  k.stale_lr = true;
  return k;
}
TEST(ParameterServer, StaleLrInverseAdamInChunksEqualsSerialApplication) {
  run_serial_case(stale_lr_case(1, "adam", 1));
}
TEST(ParameterServer, StaleLrInverseLarsEqualsSerialApplication) {
  run_serial_case(stale_lr_case(1, "lars", 1024));
}
TEST(ParameterServer, StaleLrInverseMomentumTwoPsEqualsSerialApplication) {
  run_serial_case(stale_lr_case(2, "momentum", 1));
}
// The same cases with MPI messages only (--ps-shm false): the shared ring changes no value.
TEST(ParameterServer, WithoutSharedRingsIssuedPushesInChunksEqualSerialApplication) {
  run_serial_case({2, "adam", 3, 0, 1, false, true, false});
}
TEST(ParameterServer, WithoutSharedRingsDanaPushesPastMaxStepsEqualSerialApplication) {
  run_serial_case({1, "momentum", 4, 5, 1, true, false, false});
}
// --wire-dtype bf16 | fp16: the ps applies exactly the gradients rounded once to 16 bits —
// through the shared ring (rounded fp32 values in the slots) and as 16-bit MPI messages (the
// ps's ring of 16-bit receives, widened on arrival), with 1 and 2 ps, in chunks.
TEST(ParameterServer, Bf16WireIssuedPushesEqualSerialApplicationOfRoundedGradients) {
  run_serial_case({1, "momentum", 4, 0, 1, false, true, true, WireDtype::bf16});
}
TEST(ParameterServer, Fp16WireWithoutSharedRingsEqualsSerialApplicationOfRoundedGradients) {
  run_serial_case({2, "momentum", 3, 0, 1, false, false, false, WireDtype::fp16});
}
TEST(ParameterServer, Bf16WireDanaWithoutSharedRingsEqualsSerialApplicationOfRoundedGradients) {
  run_serial_case({1, "momentum", 4, 0, 1024, true, true, false, WireDtype::bf16});
}
// A gradient value fp16 cannot hold (|x| ≥ 65520 becomes Inf) ends the push before any chunk
// leaves: the worker throws RuntimeFault naming --wire-dtype, and the ps sees the header only.
// The ps here is a stand-in that answers the header, so that the worker's posted receives complete.
TEST(ParameterServer, Fp16WireRefusesAGradientBeyondItsRangeBeforeSendingIt) {
  Cluster cluster(MPI_COMM_WORLD, 1);
  constexpr std::size_t kN = 512;  // one chunk, every message below the eager limit
  const int worker0 = cluster.worker_rank(0);
  // The client and the reply's destination outlive the stand-in's answer (its posted receives).
  std::optional<PsClient> client;
  std::vector<float> params(kN);
  if (cluster.is_chief()) {
    client.emplace(cluster, shard_ranges(kN, 1), 10.0, kDefaultChunkBytes, WireDtype::fp16);
    std::vector<float> g(kN, 0.5f);
    g[kN - 1] = 1.0e5f;  // in the chunk that travels first
    try {
      (void)client->push_pull(g.data(), 8, params.data(), false);
      ADD_FAILURE() << "an fp16 push of 1e5 was sent";
    } catch (const RuntimeFault& e) {
      EXPECT_NE(std::string(e.what()).find("--wire-dtype fp16"), std::string::npos) << e.what();
    }
    EXPECT_EQ(client->pushed_bytes(), 0);
  }
  if (cluster.is_ps()) {
    MsgHeader h;
    MPI_Recv(&h, sizeof h, MPI_BYTE, worker0, kTagPush, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  MPI_Barrier(MPI_COMM_WORLD);  // the worker has given up on its push
  if (cluster.is_ps()) {
    int chunk = 0;
    MPI_Iprobe(worker0, MPI_ANY_TAG, cluster.payload_comm(), &chunk, MPI_STATUS_IGNORE);
    EXPECT_EQ(chunk, 0) << "a chunk of the refused push reached the ps";
    MsgHeader reply;  // completes the worker's posted receives
    MPI_Send(&reply, sizeof reply, MPI_BYTE, worker0, kTagReply, MPI_COMM_WORLD);
    MPI_Send(params.data(), static_cast<int>(kN), MPI_FLOAT, worker0, 0, cluster.payload_comm());
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (cluster.is_chief()) {  // both answers in before the client and params go
    MPI_Status st;
    int flag = 0;
    for (int tries = 0; tries < 1000 && !flag; ++tries) {
      MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &flag, &st);  // drives progress
      flag = params[0] == 0.0f && params[kN - 1] == 0.0f ? 1 : 0;
      if (!flag) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    EXPECT_TRUE(flag) << "the stand-in's reply did not land";
  }
  MPI_Barrier(MPI_COMM_WORLD);
}
TEST(ParameterServer, DanaMaxStepsCapsAppliedPushes) {
  run_serial_case({1, "momentum", 4, 5, 1024, true});
}

TEST(ParameterServer, MaxStepsCapsAppliedPushes) {
  // 5 rounds of pushes, of which only the first 2·workers + 1 may be applied.
  const int workers = world_size() - 1;
  run_serial_case({1, "momentum", 5, 2 * static_cast<std::int64_t>(workers) + 1});
}

TEST(ParameterServer, MaxStepsCapsAppliedPushesTwoPs) {
  const int workers = world_size() - 2;
  run_serial_case({2, "adam", 4, std::max<std::int64_t>(1, 3 * workers - 1)});
}

/// Every worker pushes `rounds` times at once, each push through `push(client, g, params, me)`
/// (returning its PushResult), in chunks of `chunk_kb` KiB. SGD at lr 0.5 with dyadic gradients
/// grad(w, i) is exact in any arrival order, so the end must be exactly init − lr·Σ g after
/// rounds × workers global steps, each worker's replies growing, and no push ignored.
template <typename Grad, typename Push>
void run_never_lost_case(int rounds, int chunk_kb, Grad grad, Push push) {
  const int W = world_size();
  const int num_ps = W >= 3 ? 2 : 1;
  Cluster cluster(MPI_COMM_WORLD, num_ps);
  const int workers = cluster.num_workers();
  Config cfg;
  cfg.optimizer = OptimizerKind::sgd;
  cfg.lr = 0.5f;
  cfg.timeout = 60.0;
  cfg.ps_chunk_kb = chunk_kb;
  const ServedStats st = serve(cluster, cfg, rounds * workers, [&] {
    PsClient client(cluster, shard_ranges(kParams, num_ps), 60.0,
                    static_cast<std::size_t>(chunk_kb) * 1024);
    const int me = cluster.me().index;
    if (cluster.is_chief()) {
      std::vector<float> zeros(kParams, 0.0f);
      client.load(zeros.data(), nullptr, nullptr, 0, 0);
    }
    MPI_Barrier(cluster.role_comm());
    std::vector<float> g(kParams), params(kParams);
    for (std::size_t i = 0; i < kParams; ++i) g[i] = grad(me, i);
    std::int64_t prev = -1;
    for (int r = 0; r < rounds; ++r) {
      const PushResult res = push(client, g, params, me);
      EXPECT_GT(res.global_step, prev) << "global_step must grow with each of my pushes";
      prev = res.global_step;
    }
    MPI_Barrier(cluster.role_comm());  // every push done
    const PushResult fin = client.pull(params.data());
    EXPECT_EQ(fin.global_step, static_cast<std::int64_t>(rounds) * workers);
    for (std::size_t i = 0; i < kParams; ++i) {
      float sum = 0.0f;
      for (int w = 0; w < workers; ++w) sum += grad(w, i);
      if (params[i] != -0.5f * rounds * sum) {
        ADD_FAILURE() << "element " << i << " is " << params[i] << ", expected "
                      << -0.5f * rounds * sum;
        break;
      }
    }
    client.done();
  });
  EXPECT_EQ(st.pushes, static_cast<std::int64_t>(rounds) * workers * num_ps);
  EXPECT_EQ(st.ignored, 0);
}

TEST(ParameterServer, ConcurrentPushesAreNeverLost) {
  run_never_lost_case(
      25, 1024,
      [](int w, std::size_t i) { return 0.125f * static_cast<float>((w + 1) * (1 + i % 3)); },
      [](PsClient& client, std::vector<float>& g, std::vector<float>& params, int /*me*/) {
        return client.push_pull(g.data(), 4, params.data(), false);
      });
}

TEST(ParameterServer, InterleavedIssuedPushesAreNeverLost) {
  // Every worker issues its pushes in pieces with pauses between them, all at once, in 1 KiB
  // chunks: the ps receives and applies the chunks of several pushes interleaved.
  run_never_lost_case(
      12, 1, [](int w, std::size_t i) { return 0.25f * static_cast<float>((w + 1) * (1 + i % 5)); },
      [](PsClient& client, std::vector<float>& g, std::vector<float>& params, int me) {
        client.begin_push(g.data(), 4, params.data(), false);
        for (std::size_t from = kParams; from > 0;) {
          from = from > 150 ? from - 150 : 0;
          client.push_ready(from);
          std::this_thread::sleep_for(std::chrono::microseconds(200 * (me + 1)));
        }
        return client.finish_push();
      });
}

TEST(ParameterServer, LoadSetsResumeStepAndState) {
  // LOAD with a resume step and optimizer state: the next push is applied as global step `start`
  // on top of the loaded m (Adam's bias correction depends on it).
  Cluster cluster(MPI_COMM_WORLD, 1);
  Config cfg = ps_config("adam");
  cfg.lr_schedule = LrSchedule::constant;
  constexpr std::int64_t kStart = 40;
  const ServedStats st = serve(cluster, cfg, 100, [&] {
    auto cpu = make_cpu_backend();
    Optimizer opt(cfg, *cpu, kParams, 100);
    std::vector<float> m0(kParams), v0(kParams);
    for (std::size_t i = 0; i < kParams; ++i) {
      m0[i] = 0.01f * std::sin(static_cast<float>(i));
      v0[i] = 1e-4f * (1.0f + std::cos(static_cast<float>(i)));
    }
    cpu->copy_to_device(opt.m(), m0.data(), kParams * 4);
    cpu->copy_to_device(opt.v(), v0.data(), kParams * 4);
    std::vector<float> ref = initial_params();
    opt.apply(ref.data(), gradient(0, 0).data(), kStart);

    PsClient client(cluster, shard_ranges(kParams, 1), 60.0);
    if (cluster.is_chief()) {
      const auto init = initial_params();
      client.load(init.data(), m0.data(), v0.data(), kStart, 0);
      std::vector<float> params(kParams);
      const PushResult res = client.push_pull(gradient(0, 0).data(), 1, params.data(), false);
      EXPECT_EQ(res.global_step, kStart + 1);
      expect_close(params, ref, "push after LOAD at step " + std::to_string(kStart));
    }
    client.done();
  });
  EXPECT_EQ(st.pushes, 1);
}

TEST(ParameterServer, ReplyChunksSurviveAWorkerThatIsSlowToReceiveThem) {
  // An async reply leaves from the ring slot its chunk arrived in (ps/server_io.cpp, kRingSlots): a
  // slot may take a new chunk only once its reply has left. Worker 0 speaks the protocol by hand
  // (ps/protocol.hpp): it posts the reply's receives and sends a push of 11 chunks, then makes no
  // MPI call for 0.3 s. On shared memory the ps copies the chunks itself meanwhile and applies the
  // first 4 into its 4 slots; the 5th chunk needs slot 0, whose reply worker 0 has not copied —
  // a ps that took it anyway would hand worker 0 chunk 5's parameters as chunk 1's. The chunks
  // (32 KiB) are above Open MPI's shared-memory eager limit (4 KiB), so a reply's send is not
  // complete before the worker takes it.
  constexpr std::size_t kChunkKb = 32, kN = 10 * kChunkKb * 256 + 13;
  Cluster cluster(MPI_COMM_WORLD, 1);
  Config cfg = ps_config("sgd");
  cfg.ps_chunk_kb = kChunkKb;
  const ServedStats st = serve(
      cluster, cfg, 1,
      [&] {
        PsClient client(cluster, shard_ranges(kN, 1), 60.0, kChunkKb * 1024);
        if (cluster.is_chief()) {
          std::vector<float> init(kN), g(kN);
          for (std::size_t i = 0; i < kN; ++i) {
            init[i] = std::sin(0.01f * static_cast<float>(i));
            g[i] = std::cos(0.37f * static_cast<float>(i)) + 2.0f;
          }
          client.load(init.data(), nullptr, nullptr, 0, 0);
          auto cpu = make_cpu_backend();
          Optimizer opt(cfg, *cpu, kN, 1);
          std::vector<float> ref = init;
          opt.apply(ref.data(), g.data(), 0);

          const ChunkLayout chunks(kN, kChunkKb * 1024);
          ASSERT_GT(chunks.count(), 8u);
          const int ps = cluster.ps_rank(0);
          std::vector<float> params(kN, -1.0f);
          MsgHeader out, in;
          out.samples = 8;
          std::vector<MPI_Request> reqs(1 + 2 * chunks.count() + 1, MPI_REQUEST_NULL);
          std::size_t k = 0;
          MPI_Irecv(&in, sizeof in, MPI_BYTE, ps, MPI_ANY_TAG, cluster.world(), &reqs[k++]);
          for (std::size_t t = 0; t < chunks.count(); ++t) {
            const std::size_t c = chunks.travel(t);
            MPI_Irecv(params.data() + chunks.begin(c),
                      static_cast<int>(chunks.size(c) * sizeof(float)), MPI_BYTE, ps, 0,
                      cluster.payload_comm(), &reqs[k++]);
          }
          MPI_Isend(&out, sizeof out, MPI_BYTE, ps, kTagPush, cluster.world(), &reqs[k++]);
          for (std::size_t t = 0; t < chunks.count(); ++t) {
            const std::size_t c = chunks.travel(t);
            MPI_Isend(g.data() + chunks.begin(c), static_cast<int>(chunks.size(c) * sizeof(float)),
                      MPI_BYTE, ps, 0, cluster.payload_comm(), &reqs[k++]);
          }
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
          MPI_Waitall(static_cast<int>(k), reqs.data(), MPI_STATUSES_IGNORE);
          EXPECT_EQ(in.global_step, 1);
          expect_close(params, ref, "the reply to a push received late");
          const PushResult last = client.pull(params.data());
          EXPECT_EQ(last.global_step, 1);
          expect_close(params, ref, "a pull after it");
        }
        client.done();
      },
      kN);
  EXPECT_EQ(st.pushes, 1);
}

/// The aggregating update rules (ps_sync, ps_bounded), SGD at lr 0.5 without weight decay: every
/// worker pushes `rounds` gradients at once, gradient(w, r) with w + 1 samples, so round r must
/// make exactly one update, θ ← θ − lr·Σ_w (n_w / N)·g_w summed in worker order, and every reply
/// of round r must carry global step r + 1 and the parameters after it, none dropped. With
/// `layerwise` (lars, lamb; shards of whole tensors) the update of Σ_w (n_w / N)·g_w is an
/// in-process Optimizer's over the whole buffer.
void run_aggregate_case(Mode mode, int max_staleness, int rounds, WireDtype wire = WireDtype::fp32,
                        OptimizerKind layerwise = OptimizerKind::sgd) {
  const int num_ps = world_size() >= 3 ? 2 : 1;
  Cluster cluster(MPI_COMM_WORLD, num_ps);
  const int workers = cluster.num_workers();
  Config cfg;
  cfg.mode = mode;
  cfg.num_ps = num_ps;
  cfg.max_staleness = max_staleness;
  cfg.optimizer = OptimizerKind::sgd;
  cfg.lr = 0.5f;
  cfg.weight_decay = 0.0f;
  cfg.timeout = 60.0;
  cfg.ps_chunk_kb = 1;  // chunks of 256 floats: a sync push is received whole in several
  cfg.wire_dtype = wire;
  if (layerwise != OptimizerKind::sgd) {
    cfg.optimizer = layerwise;
    cfg.lr = layerwise == OptimizerKind::lamb ? 0.01f : 0.5f;
    cfg.weight_decay = 1e-3f;
    cfg.lars_eta = 0.02f;
  }
  const ServedStats st = serve(cluster, cfg, rounds, [&] {
    // The reference after each round, in the ps's order: the weighted sum, then the update.
    std::vector<std::vector<float>> after;
    std::vector<float> ref = initial_params();
    auto cpu = make_cpu_backend();
    std::optional<Optimizer> opt;
    if (layerwise != OptimizerKind::sgd)
      opt.emplace(cfg, *cpu, kParams, rounds, std::vector<FloatRange>{},
                  param_segments(tensors(), kParams));
    const float total = static_cast<float>(workers * (workers + 1) / 2);
    for (int r = 0; r < rounds; ++r) {
      std::vector<float> sum(kParams, 0.0f);
      for (int w = 0; w < workers; ++w) {
        const std::vector<float> g = on_wire(wire, gradient(w, r));
        const float f = static_cast<float>(w + 1) / total;
        for (std::size_t i = 0; i < kParams; ++i) sum[i] += f * g[i];
      }
      if (opt) opt->apply(ref.data(), sum.data(), r);
      else
        for (std::size_t i = 0; i < kParams; ++i) ref[i] -= cfg.lr * sum[i];
      after.push_back(ref);
    }
    PsClient client(cluster, ps_shard_ranges(cfg, tensors(), kParams, num_ps), 60.0, 1024, wire);
    const int me = cluster.me().index;
    if (cluster.is_chief()) client.load(initial_params().data(), nullptr, nullptr, 0, 0);
    MPI_Barrier(cluster.role_comm());
    std::vector<float> params(kParams);
    client.pull(params.data());
    for (int r = 0; r < rounds; ++r) {
      const PushResult res = client.push_pull(gradient(me, r).data(), me + 1, params.data(), false);
      EXPECT_EQ(res.global_step, r + 1) << "round " << r;
      EXPECT_FALSE(res.dropped) << "round " << r;
      expect_close(params, after[r], "reply in round " + std::to_string(r), 1e-5f);
    }
    client.done();
  });
  EXPECT_EQ(st.pushes, static_cast<std::int64_t>(rounds) * workers * num_ps);
  EXPECT_EQ(st.dropped, 0);
  EXPECT_EQ(st.ignored, 0);
}

TEST(ParameterServer, SyncThroughThePsAppliesTheWeightedMeanOncePerStep) {
  run_aggregate_case(Mode::sync, -1, 5);
}
TEST(ParameterServer, BoundedStalenessZeroAppliesWhatSyncApplies) {
  run_aggregate_case(Mode::async, 0, 5);
}
// LARS and LAMB on shards of whole tensors: the aggregate's update is the whole buffer's.
TEST(ParameterServer, SyncThroughThePsWithLarsAppliesTheMeanOncePerStep) {
  run_aggregate_case(Mode::sync, -1, 4, WireDtype::fp32, OptimizerKind::lars);
}
TEST(ParameterServer, BoundedStalenessWithLambAppliesTheMeanOncePerStep) {
  run_aggregate_case(Mode::async, 0, 4, WireDtype::fp32, OptimizerKind::lamb);
}
// A 16-bit push received whole into the aggregate's buffer (the 16-bit staging of a shard).
TEST(ParameterServer, SyncThroughThePsWithBf16WireAppliesTheMeanOfRoundedGradients) {
  run_aggregate_case(Mode::sync, -1, 4, WireDtype::bf16);
}
TEST(ParameterServer, BoundedStalenessWithFp16WireAppliesTheMeanOfRoundedGradients) {
  run_aggregate_case(Mode::async, 0, 3, WireDtype::fp16);
}

/// Sync through the ps with --replicas-to-aggregate 1: workers push one at a time on the same
/// parameters, so worker 0's push makes each step and every later one is late: dropped, answered
/// at once with the new parameters and its staleness (1), never applied.
TEST(ParameterServer, SyncBackupWorkersLatePushesAreDropped) {
  const int num_ps = world_size() >= 3 ? 2 : 1;
  Cluster cluster(MPI_COMM_WORLD, num_ps);
  const int workers = cluster.num_workers();
  constexpr int kRounds = 3;
  Config cfg;
  cfg.mode = Mode::sync;
  cfg.num_ps = num_ps;
  cfg.replicas_to_aggregate = 1;
  cfg.optimizer = OptimizerKind::sgd;
  cfg.lr = 0.5f;
  cfg.weight_decay = 0.0f;
  cfg.timeout = 60.0;
  const ServedStats st = serve(cluster, cfg, kRounds, [&] {
    std::vector<float> ref = initial_params();
    PsClient client(cluster, shard_ranges(kParams, num_ps), 60.0);
    const int me = cluster.me().index;
    if (cluster.is_chief()) client.load(ref.data(), nullptr, nullptr, 0, 0);
    MPI_Barrier(cluster.role_comm());
    std::vector<float> params(kParams);
    for (int r = 0; r < kRounds; ++r) {
      EXPECT_EQ(client.pull(params.data()).global_step, r);  // every worker on step r
      MPI_Barrier(cluster.role_comm());
      const std::vector<float> g0 = gradient(0, r);
      for (std::size_t i = 0; i < kParams; ++i) ref[i] -= cfg.lr * g0[i];
      for (int w = 0; w < workers; ++w) {
        if (w == me) {
          const PushResult res = client.push_pull(gradient(w, r).data(), 8, params.data(), false);
          EXPECT_EQ(res.global_step, r + 1);
          EXPECT_EQ(res.dropped, w > 0) << "worker " << w << ", round " << r;
          EXPECT_EQ(res.staleness, w > 0 ? 1 : 0) << "worker " << w << ", round " << r;
          expect_close(params, ref, "reply to worker " + std::to_string(w), 1e-5f);
        }
        MPI_Barrier(cluster.role_comm());  // pass the token
      }
    }
    client.done();
  });
  EXPECT_EQ(st.pushes, kRounds * num_ps);
  EXPECT_EQ(st.dropped, static_cast<std::int64_t>(kRounds) * (workers - 1) * num_ps);
  EXPECT_EQ(st.ignored, 0);
}

// A snapshot's parameters go to a checkpoint, not to the model: the chief's next push still
// carries the step of the parameters it computed on. Worker 1 takes step 0 → 1 first; the chief
// then checkpoints (snapshot at step 1) and pushes its gradient of step 0, which is late and must
// be dropped (the snapshot's step was taken as the model's: the stale gradient was applied as
// step 2, and a run could end past its last epoch).
TEST(ParameterServer, ASnapshotDoesNotMakeTheChiefsLateGradientFresh) {
  if (world_size() < 3) GTEST_SKIP() << "needs 1 ps and 2 workers";
  Cluster cluster(MPI_COMM_WORLD, 1);
  Config cfg;
  cfg.mode = Mode::sync;
  cfg.num_ps = 1;
  cfg.replicas_to_aggregate = 1;
  cfg.optimizer = OptimizerKind::sgd;
  cfg.lr = 0.5f;
  cfg.weight_decay = 0.0f;
  cfg.timeout = 60.0;
  const ServedStats st = serve(cluster, cfg, 4, [&] {
    PsClient client(cluster, shard_ranges(kParams, 1), 60.0);
    const int me = cluster.me().index;
    const std::vector<float> init = initial_params();
    if (cluster.is_chief()) client.load(init.data(), nullptr, nullptr, 0, 0);
    MPI_Barrier(cluster.role_comm());
    std::vector<float> params(kParams);
    EXPECT_EQ(client.pull(params.data()).global_step, 0);
    MPI_Barrier(cluster.role_comm());
    if (me == 1) {
      const PushResult res = client.push_pull(gradient(1, 0).data(), 8, params.data(), false);
      EXPECT_EQ(res.global_step, 1);
      EXPECT_FALSE(res.dropped);
    }
    MPI_Barrier(cluster.role_comm());
    if (cluster.is_chief()) {
      std::vector<float> p(kParams), m(kParams), v(kParams);
      EXPECT_EQ(client.snapshot(p.data(), m.data(), v.data()), 1);
      const PushResult res = client.push_pull(gradient(0, 0).data(), 8, params.data(), false);
      EXPECT_TRUE(res.dropped) << "the chief's gradient of step 0, pushed at step 1";
      EXPECT_EQ(res.staleness, 1);
      EXPECT_EQ(res.global_step, 1);
    }
    MPI_Barrier(cluster.role_comm());
    client.done();
  });
  EXPECT_EQ(st.pushes, 1);
  EXPECT_EQ(st.dropped, 1);
}

}  // namespace
}  // namespace dtrain
