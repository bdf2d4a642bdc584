// tests/mpi/test_wire_hierarchical.cpp — the two new ways of summing a bucket, against what each
// promises (run under mpiexec -n 2, 3 and 4, oversubscribed):
//   --wire-dtype bf16|fp16 (collectives/wire.hpp): the result equals, bit for bit on every rank,
//     the reference computed here from every rank's inputs — each value rounded once to 16 bits,
//     added in fp32 in rank order, the sum rounded once — and lies within the documented
//     tolerance (2u + W·2^-24)·Σ|x| (+ (W + 1)·2^-25 for fp16) of the exact sum; fp32 equals
//     MPI_Allreduce.
//   --allreduce hierarchical (collectives/hierarchical.hpp): one node, two-rank nodes and one-rank
//     nodes (DTRAIN_TEST_RANKS_PER_NODE's knob, ReduceOptions::ranks_per_node); the result is the
//     same bits on every rank, equals MPI_Allreduce bit for bit with 2 workers, equals the
//     reference sum in node order where the order is known, and MPI_Allreduce to (W − 1)·2^-24·Σ|x|
//     where the leaders' MPI order is not; through BucketedAllreduce with the stop flag, threads
//     on; summed in place in the ranks' homes, the slots' bits, also while the lower buckets are
//     still being written. With 16-bit slots: bit for bit the documented rounding sequence (each
//     input, each node total, the leaders' sum rounded once, fp32 additions in rank order) and
//     within its bound of the exact sum, on one node the flat 16-bit sum's bits; an fp16 overflow
//     is +Inf everywhere.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "common/mpi_world.hpp"
#include "dtrain/collectives/bucketed.hpp"
#include "dtrain/collectives/hierarchical.hpp"
#include "dtrain/collectives/wire.hpp"
#include "dtrain/dnn/bf16.hpp"

namespace dtrain {
namespace {

using test::world_rank;
using test::world_size;

/// Rank r's value i: gradient-like, signs mixed, magnitudes over several decades, some tiny.
float input(int r, std::size_t i) {
  const double t = static_cast<double>(i) * 0.61803 + r * 1.3;
  return static_cast<float>(std::sin(t) * std::pow(10.0, -1.0 - static_cast<double>((i + r) % 6)));
}

float round_wire(WireDtype w, float f) {
  if (w == WireDtype::bf16) return round_to_bf16(f);
  return fp16_to_float(float_to_fp16(f));
}

/// True when every rank holds the same bits in `v`.
bool same_on_every_rank(const std::vector<float>& v) {
  std::uint64_t h = 1469598103934665603ull;  // FNV-1a over the bytes
  const auto* p = reinterpret_cast<const unsigned char*>(v.data());
  for (std::size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
  std::uint64_t lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  return lo == hi;
}

TEST(WireAllreduce, SixteenBitsSumInFp32AndMatchTheReferenceBitForBit) {
  const int rank = world_rank(), W = world_size();
  for (WireDtype w : {WireDtype::bf16, WireDtype::fp16}) {
    WireAllreduce ar(MPI_COMM_WORLD, w);
    const double u = w == WireDtype::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    const double tiny = w == WireDtype::fp16 ? (W + 1) * std::ldexp(1.0, -25) : 0.0;
    for (std::size_t n : {std::size_t{1}, std::size_t{3}, std::size_t{1000}, std::size_t{100003}}) {
      for (bool blocking : {true, false}) {
        std::vector<float> data(n);
        for (std::size_t i = 0; i < n; ++i) data[i] = input(rank, i);
        ar.sum(data.data(), n, blocking, 60, "test");
        std::size_t wrong = 0, outside = 0;
        for (std::size_t i = 0; i < n; ++i) {
          float acc = 0;
          double exact = 0, mag = 0;
          for (int r = 0; r < W; ++r) {
            acc += round_wire(w, input(r, i));
            exact += input(r, i);
            mag += std::fabs(input(r, i));
          }
          if (data[i] != round_wire(w, acc) && wrong++ == 0)
            ADD_FAILURE() << to_string(w) << " n " << n << " element " << i << ": " << data[i]
                          << " vs reference " << round_wire(w, acc);
          const double bound = (2 * u + W * std::ldexp(1.0, -24)) * mag + tiny;
          if (std::fabs(data[i] - exact) > bound && outside++ == 0)
            ADD_FAILURE() << to_string(w) << " element " << i << " off by "
                          << std::fabs(data[i] - exact) << " > " << bound;
        }
        EXPECT_EQ(wrong, 0u);
        EXPECT_EQ(outside, 0u);
        EXPECT_TRUE(same_on_every_rank(data));
      }
    }
  }
}

TEST(WireAllreduce, Fp32IsTheBareAllreduce) {
  // Blocking: MPI_Allreduce's bits; non-blocking: MPI_Iallreduce's (Open MPI's two families may
  // add in different orders from 3 ranks on).
  const int rank = world_rank();
  const std::size_t n = 4097;
  WireAllreduce ar(MPI_COMM_WORLD, WireDtype::fp32);
  for (bool blocking : {true, false}) {
    std::vector<float> a(n), b(n);
    for (std::size_t i = 0; i < n; ++i) a[i] = b[i] = input(rank, i);
    ar.sum(a.data(), n, blocking, 60, "test");
    if (blocking) {
      MPI_Allreduce(MPI_IN_PLACE, b.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                    MPI_COMM_WORLD);
    } else {
      MPI_Request req;
      MPI_Iallreduce(MPI_IN_PLACE, b.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                     MPI_COMM_WORLD, &req);
      MPI_Wait(&req, MPI_STATUS_IGNORE);
    }
    EXPECT_EQ(std::memcmp(a.data(), b.data(), n * sizeof(float)), 0) << "blocking " << blocking;
  }
}

TEST(WireFormat, ParsesTheOptionAndNamesItInErrors) {
  EXPECT_EQ(parse_enum<WireDtype>("bf16", "wire-dtype"), WireDtype::bf16);
  EXPECT_EQ(parse_enum<WireDtype>("fp16", "wire-dtype"), WireDtype::fp16);
  EXPECT_EQ(parse_enum<WireDtype>("fp32", "wire-dtype"), WireDtype::fp32);
  try {
    (void)parse_enum<WireDtype>("int8", "wire-dtype");
    ADD_FAILURE() << "int8 accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("--wire-dtype"), std::string::npos) << e.what();
  }
}

TEST(HierarchicalAllreduce, EveryNodeShapeSumsAsPromised) {
  const int rank = world_rank(), W = world_size();
  for (int per_node : {0, 2, 1}) {
    HierarchicalAllreduce ar(MPI_COMM_WORLD, 100004, WireDtype::fp32, per_node);
    const int L = per_node == 0 ? W : std::min(per_node, W);
    EXPECT_EQ(ar.nodes(), (W + L - 1) / L) << "ranks per node " << per_node;
    for (std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{4096}, std::size_t{100003}}) {
      for (int round = 0; round < 3; ++round) {  // both slot sets, then the first again
        for (bool blocking : {true, false}) {
          std::vector<float> data(n), bare(n);
          for (std::size_t i = 0; i < n; ++i) data[i] = bare[i] = input(rank + round, i);
          ar.sum(data.data(), n, blocking, 60, "test");
          MPI_Allreduce(MPI_IN_PLACE, bare.data(), static_cast<int>(n), MPI_FLOAT, MPI_SUM,
                        MPI_COMM_WORLD);
          EXPECT_TRUE(same_on_every_rank(data)) << "ranks per node " << per_node << " n " << n;
          // Where the order of additions is known: in node order, node totals in node order
          // (two leaders add a + b, which MPI cannot order differently).
          const bool known = ar.nodes() <= 2;
          std::size_t wrong = 0;
          for (std::size_t i = 0; i < n; ++i) {
            float want = 0, mag = 0;
            if (known) {
              float node_total[2] = {0, 0};
              for (int r = 0; r < W; ++r) {
                float& t = node_total[r / L];
                t = (r % L == 0) ? input(r + round, i) : t + input(r + round, i);
              }
              want = ar.nodes() == 1 ? node_total[0] : node_total[0] + node_total[1];
            }
            for (int r = 0; r < W; ++r) mag += std::fabs(input(r + round, i));
            const bool ok =
                known ? data[i] == want
                      : std::fabs(data[i] - bare[i]) <= (W - 1) * std::ldexp(1.0f, -23) * mag;
            if (!ok && wrong++ == 0)
              ADD_FAILURE() << "ranks per node " << per_node << " n " << n << " element " << i
                            << ": " << data[i] << " (MPI: " << bare[i] << ")";
            if (W == 2 && data[i] != bare[i] && wrong++ == 0)
              ADD_FAILURE() << "2 workers: not MPI_Allreduce's bits at " << i;
          }
          EXPECT_EQ(wrong, 0u);
        }
      }
    }
  }
}

/// Hierarchical sums in nodes of `per_node` ranks (0: the real nodes), values `wire` between
/// ranks, in place in the node's homes where `in_place` (fp32).
ReduceOptions hierarchical(int per_node, WireDtype wire, bool in_place = false) {
  ReduceOptions how;
  how.hierarchical = true;
  how.wire = wire;
  how.ranks_per_node = per_node;
  how.in_place = in_place;
  return how;
}

TEST(HierarchicalAllreduce, InPlaceInTheHomesGivesTheSlotsBits) {
  // Summed where the values lie (each rank's home in the node's segment), every node shape gives
  // the bits of the copy-in, copy-out sum, at any offset of the home, every round.
  const int rank = world_rank(), W = world_size();
  for (int per_node : {0, 2, 1}) {
    const std::size_t cap = 100004;
    HierarchicalAllreduce ar(MPI_COMM_WORLD, cap, WireDtype::fp32, per_node, cap);
    const int L = per_node == 0 ? W : std::min(per_node, W);
    float* home = ar.home();
    ASSERT_EQ(home == nullptr, L == 1 || (per_node == 2 && W % 2 == 1 && rank == W - 1))
        << "a home where the rank shares its node, per node " << per_node;
    // Alone on its node a rank has no home: its buffer of its own takes part in the leaders' sums.
    std::vector<float> own(home == nullptr ? cap : 0);
    if (home == nullptr) home = own.data();
    else EXPECT_EQ(reinterpret_cast<std::uintptr_t>(home) % 4096, 0u) << "a home starts on a page";
    for (int round = 0; round < 3; ++round) {
      for (std::size_t at : {std::size_t{0}, std::size_t{3}}) {
        for (std::size_t n : {std::size_t{5}, std::size_t{70001}}) {
          std::vector<float> slots(n);
          for (std::size_t i = 0; i < n; ++i) home[at + i] = slots[i] = input(rank + round, i);
          home[at + n] = 7.0f;  // past the sum: untouched
          ar.sum(home + at, n, round != 1, 60, "test");
          ar.sum(slots.data(), n, round != 1, 60, "test");
          EXPECT_EQ(std::memcmp(home + at, slots.data(), n * sizeof(float)), 0)
              << "per node " << per_node << " at " << at << " n " << n << " round " << round;
          EXPECT_EQ(home[at + n], 7.0f);
          std::vector<float> mine(home + at, home + at + n);
          EXPECT_TRUE(same_on_every_rank(mine));
        }
      }
    }
  }
}

TEST(BucketedAllreduce, InPlaceWhileBackwardStillWritesTheRest) {
  // The gradient in the shared homes, each region written just before ready(): the communication
  // thread sums the finished buckets out of every rank's home while this thread still writes the
  // lower ones, as backward does. Every bucket and the flag are summed exactly (small integers).
  const int rank = world_rank(), W = world_size();
  for (int per_node : {0, 2}) {
    const std::size_t n = 30011;
    BucketedAllreduce ar(MPI_COMM_WORLD, n, 4096, true,
                         hierarchical(per_node, WireDtype::fp32, true));
    std::vector<float> own(n + 1);
    float* data = ar.home() != nullptr ? ar.home() : own.data();
    const bool shares = per_node == 0 || !(W % 2 == 1 && rank == W - 1);
    EXPECT_EQ(ar.home() != nullptr, W > 1 && shares);
    for (int step = 0; step < 4; ++step) {
      auto value = [&](int r, std::size_t i) {
        return static_cast<float>((r + static_cast<int>(i % 13) + step) % 40);
      };
      ar.begin(data, rank == 0 && step % 2 == 1 ? 1.0f : 0.0f);
      for (std::size_t to = n; to > 0;) {
        const std::size_t from = to > 3000 ? to - 3000 : 0;
        for (std::size_t i = from; i < to; ++i) data[i] = value(rank, i);
        ar.ready(from);
        to = from;
      }
      EXPECT_EQ(ar.finish(60).flag, step % 2 == 1 ? 1.0f : 0.0f);
      std::size_t bad = 0;
      for (std::size_t i = 0; i < n; ++i) {
        float want = 0;
        for (int r = 0; r < W; ++r) want += value(r, i);
        if (data[i] != want && bad++ == 0)
          ADD_FAILURE() << "per node " << per_node << " step " << step << " element " << i << " is "
                        << data[i] << ", expected " << want;
      }
      EXPECT_EQ(bad, 0u);
    }
  }
}

/// The documented 16-bit hierarchical sum of element i (collectives/hierarchical.hpp): every
/// input rounded once, each node's rounded inputs added in fp32 in rank order and the total
/// rounded, the node totals added in fp32 in node order and rounded (one node: no third rounding).
float hierarchical_reference(WireDtype w, int W, int L, int round, std::size_t i) {
  float all = 0;
  const int nodes = (W + L - 1) / L;
  for (int k = 0; k < nodes; ++k) {
    float node = 0;
    for (int r = k * L; r < std::min(W, (k + 1) * L); ++r)
      node += round_wire(w, input(r + round, i));
    all += round_wire(w, node);
  }
  return nodes == 1 ? all : round_wire(w, all);
}

TEST(HierarchicalAllreduce, SixteenBitSlotsRoundAsDocumented) {
  const int rank = world_rank(), W = world_size();
  for (WireDtype w : {WireDtype::bf16, WireDtype::fp16}) {
    const double u = w == WireDtype::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
    WireAllreduce flat(MPI_COMM_WORLD, w);
    for (int per_node : {0, 2, 1}) {
      HierarchicalAllreduce ar(MPI_COMM_WORLD, 100004, w, per_node);
      const int L = per_node == 0 ? W : std::min(per_node, W), N = ar.nodes();
      const double tiny = w == WireDtype::fp16 ? (W + N + 1) * std::ldexp(1.0, -25) : 0.0;
      const double rel = N == 1 ? 2 * u + W * std::ldexp(1.0, -24)
                                : 3 * u + 4 * u * u + (L + N) * std::ldexp(1.0, -24);
      // Sizes around the 2048-value chunks of the fp32 sums, and below one value per rank.
      for (std::size_t n :
           {std::size_t{1}, std::size_t{3}, std::size_t{4099}, std::size_t{100003}}) {
        for (int round = 0; round < 3; ++round) {  // both slot sets, then the first again
          const bool blocking = round != 1;
          std::vector<float> data(n), plain(n);
          for (std::size_t i = 0; i < n; ++i) data[i] = plain[i] = input(rank + round, i);
          ar.sum(data.data(), n, blocking, 60, "test");
          flat.sum(plain.data(), n, blocking, 60, "test");
          EXPECT_TRUE(same_on_every_rank(data)) << to_string(w) << " per node " << per_node;
          if (N == 1)  // one node: the flat 16-bit sum's bits
            EXPECT_EQ(std::memcmp(data.data(), plain.data(), n * sizeof(float)), 0)
                << to_string(w) << " n " << n;
          std::size_t wrong = 0, outside = 0;
          for (std::size_t i = 0; i < n; ++i) {
            const float want = hierarchical_reference(w, W, L, round, i);
            double exact = 0, mag = 0;
            for (int r = 0; r < W; ++r) {
              exact += input(r + round, i);
              mag += std::fabs(input(r + round, i));
            }
            if (data[i] != want && wrong++ == 0)
              ADD_FAILURE() << to_string(w) << " per node " << per_node << " n " << n << " element "
                            << i << ": " << data[i] << " vs reference " << want;
            if (std::fabs(data[i] - exact) > rel * mag + tiny && outside++ == 0)
              ADD_FAILURE() << to_string(w) << " per node " << per_node << " element " << i
                            << " off by " << std::fabs(data[i] - exact) << " > "
                            << rel * mag + tiny;
          }
          EXPECT_EQ(wrong, 0u);
          EXPECT_EQ(outside, 0u);
        }
      }
    }
  }
}

TEST(HierarchicalAllreduce, Fp16OverflowIsInfiniteOnEveryRank) {
  // 40000 fits fp16 (max 65504), the sum of two does not: every rank gets +Inf, as with the
  // flat 16-bit sum, and the training step's finiteness check catches it.
  const int W = world_size();
  HierarchicalAllreduce ar(MPI_COMM_WORLD, 64, WireDtype::fp16);
  std::vector<float> data(5, 40000.0f);
  data[1] = 1.0f;
  ar.sum(data.data(), data.size(), true, 60, "test");
  EXPECT_TRUE(std::isinf(data[0]) && data[0] > 0) << data[0];
  EXPECT_EQ(data[1], static_cast<float>(W));
  EXPECT_TRUE(same_on_every_rank(data));
}

TEST(HierarchicalAllreduce, BucketsWithTheFlagAndAWireBetweenLeaders) {
  const int rank = world_rank(), W = world_size();
  for (int per_node : {0, 1, 2}) {
    for (WireDtype w : {WireDtype::fp32, WireDtype::bf16}) {
      for (bool overlap : {true, false}) {
        const std::size_t n = 30011;
        BucketedAllreduce ar(MPI_COMM_WORLD, n, 4096, overlap, hierarchical(per_node, w));
        for (int step = 0; step < 3; ++step) {
          std::vector<float> data(n + 1);
          // Small integers: exact in fp32 and bf16 whatever the order (sums below 256).
          for (std::size_t i = 0; i < n; ++i)
            data[i] = static_cast<float>((rank + static_cast<int>(i % 13) + step) % 40);
          ar.begin(data.data(), rank == W - 1 ? 1.0f : 0.0f);
          for (std::size_t from = n; from > 0; from = from > 5000 ? from - 5000 : 0) ar.ready(from);
          EXPECT_EQ(ar.finish(60).flag, 1.0f);
          std::size_t bad = 0;
          for (std::size_t i = 0; i < n; ++i) {
            float want = 0;
            for (int r = 0; r < W; ++r)
              want += static_cast<float>((r + static_cast<int>(i % 13) + step) % 40);
            if (data[i] != want && bad++ == 0)
              ADD_FAILURE() << "per node " << per_node << " wire " << to_string(w) << " element "
                            << i << " is " << data[i] << ", expected " << want;
          }
          EXPECT_EQ(bad, 0u);
        }
      }
    }
  }
}

TEST(BucketedAllreduce, WireDtypeThroughTheBuckets) {
  const int rank = world_rank(), W = world_size();
  const std::size_t n = 20000;
  ReduceOptions how;
  how.wire = WireDtype::fp16;
  BucketedAllreduce ar(MPI_COMM_WORLD, n, 3000, true, how);
  std::vector<float> data(n + 1);
  for (std::size_t i = 0; i < n; ++i) data[i] = input(rank, i);
  ar.begin(data.data(), 0.0f);
  for (std::size_t from = n; from > 0; from = from > 2500 ? from - 2500 : 0) ar.ready(from);
  EXPECT_EQ(ar.finish(60).flag, 0.0f);
  std::size_t outside = 0;
  for (std::size_t i = 0; i < n; ++i) {
    double exact = 0, mag = 0;
    for (int r = 0; r < W; ++r) {
      exact += input(r, i);
      mag += std::fabs(input(r, i));
    }
    const double bound = (2 * std::ldexp(1.0, -11) + W * std::ldexp(1.0, -24)) * mag +
                         (W + 1) * std::ldexp(1.0, -25);
    if (std::fabs(data[i] - exact) > bound) ++outside;
  }
  EXPECT_EQ(outside, 0u);
  data.resize(n);
  EXPECT_TRUE(same_on_every_rank(data));
}

}  // namespace
}  // namespace dtrain
