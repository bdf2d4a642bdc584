// tests/unit/test_cluster_sharding.cpp — role placement (compute_layout) and the parameter-server
// range partitions (shard_ranges; tensor_shard_ranges for LARS/LAMB; stage_shards for a pipeline),
// pure functions tested in one process with simulated ranks: hand-computed tables for small
// layouts, then the documented placement properties over many (nodes × ranks-per-node, num_ps)
// combinations, including uneven and interleaved nodes.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "dtrain/comm/cluster.hpp"
#include "dtrain/core/error.hpp"
#include "dtrain/ps/protocol.hpp"
#include "dtrain/ps/sharding.hpp"
#include "common/tensor_table.hpp"

namespace dtrain {
namespace {

std::vector<int> ps_ranks_of(const std::vector<RankInfo>& l) {
  std::vector<int> out;
  for (const auto& r : l)
    if (r.role == Role::ps) out.push_back(r.rank);
  return out;
}

/// Ranks packed by node: node i holds sizes[i] consecutive world ranks.
std::vector<int> packed(const std::vector<int>& sizes) {
  std::vector<int> out;
  for (std::size_t n = 0; n < sizes.size(); ++n)
    out.insert(out.end(), sizes[n], static_cast<int>(n));
  return out;
}

/// Ranks dealt round-robin over `nodes` nodes (rank r on node r % nodes).
std::vector<int> interleaved(int world, int nodes) {
  std::vector<int> out(world);
  for (int r = 0; r < world; ++r) out[r] = r % nodes;
  return out;
}

/// Checks every documented placement property of compute_layout(node_of_rank, num_ps).
void check_layout_properties(const std::vector<int>& node_of_rank, int num_ps) {
  SCOPED_TRACE("world " + std::to_string(node_of_rank.size()) + ", num_ps " +
               std::to_string(num_ps));
  const auto l = compute_layout(node_of_rank, num_ps);
  const int world = static_cast<int>(node_of_rank.size());
  ASSERT_EQ(static_cast<int>(l.size()), world);

  // Nodes in order of their lowest world rank; members ascending.
  std::vector<int> order;
  std::map<int, std::vector<int>> members;
  for (int r = 0; r < world; ++r) {
    if (!members.count(node_of_rank[r])) order.push_back(node_of_rank[r]);
    members[node_of_rank[r]].push_back(r);
  }
  int ps = 0;
  std::map<int, int> ps_on;  // node -> ps count
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(l[r].rank, r);
    EXPECT_EQ(l[r].node, node_of_rank[r]);
    if (l[r].role == Role::ps) {
      ++ps;
      ++ps_on[node_of_rank[r]];
    }
  }
  EXPECT_EQ(ps, num_ps);

  // On each node the ps are its highest world ranks.
  for (const auto& [node, ranks] : members) {
    const int c = ps_on[node];
    for (std::size_t i = 0; i < ranks.size(); ++i) {
      const bool want_ps = i >= ranks.size() - static_cast<std::size_t>(c);
      EXPECT_EQ(l[ranks[i]].role == Role::ps, want_ps)
          << "rank " << ranks[i] << " on node " << node;
    }
  }
  // Spread: a node holds a k-th ps only when every other node holds k−1 (or is full), and a node
  // that is not full never has fewer ps than a node after it.
  for (std::size_t i = 0; i < order.size(); ++i) {
    const int ci = ps_on[order[i]], si = static_cast<int>(members[order[i]].size());
    for (std::size_t j = 0; j < order.size(); ++j) {
      const int cj = ps_on[order[j]];
      if (ci < si) {
        EXPECT_LE(cj, ci + 1) << "node " << order[j] << " has " << cj << " ps while node "
                              << order[i] << " has only " << ci << " and room for more";
        if (j > i)
          EXPECT_LE(cj, ci) << "later node " << order[j] << " got more ps than node " << order[i];
      }
    }
  }
  // Indices: contiguous per role, increasing with world rank.
  int next_ps = 0, next_worker = 0;
  for (int r = 0; r < world; ++r) {
    if (l[r].role == Role::ps) EXPECT_EQ(l[r].index, next_ps++) << "rank " << r;
    else EXPECT_EQ(l[r].index, next_worker++) << "rank " << r;
  }
  EXPECT_EQ(next_worker, world - num_ps);
  // The chief (worker 0) is a worker and the lowest worker world rank.
  const auto chief = std::find_if(
      l.begin(), l.end(), [](const RankInfo& r) { return r.role == Role::worker && r.index == 0; });
  ASSERT_NE(chief, l.end());
  for (const auto& r : l)
    if (r.rank < chief->rank) EXPECT_EQ(r.role, Role::ps) << "rank " << r.rank;
}

TEST(ComputeLayout, OneNodePsTakeTheHighestRanks) {
  const auto l1 = compute_layout(packed({4}), 1);
  EXPECT_EQ(ps_ranks_of(l1), (std::vector<int>{3}));
  const auto l2 = compute_layout(packed({4}), 2);
  EXPECT_EQ(ps_ranks_of(l2), (std::vector<int>{2, 3}));
  EXPECT_EQ(l2[2].index, 0);
  EXPECT_EQ(l2[3].index, 1);
  EXPECT_EQ(l2[0].role, Role::worker);
  EXPECT_EQ(l2[0].index, 0);
  EXPECT_EQ(l2[1].index, 1);
  const auto l0 = compute_layout(packed({3}), 0);
  EXPECT_TRUE(ps_ranks_of(l0).empty());
  for (int r = 0; r < 3; ++r) EXPECT_EQ(l0[r].index, r);
}

TEST(ComputeLayout, TwoNodesGetOnePsEachBeforeASecond) {
  // 2 nodes × 2 ranks: {0,1} on node 0, {2,3} on node 1.
  EXPECT_EQ(ps_ranks_of(compute_layout(packed({2, 2}), 1)), (std::vector<int>{1}));
  const auto l = compute_layout(packed({2, 2}), 2);
  EXPECT_EQ(ps_ranks_of(l), (std::vector<int>{1, 3}));
  EXPECT_EQ(l[0].index, 0);  // worker 0, the chief
  EXPECT_EQ(l[2].index, 1);  // worker 1
  EXPECT_EQ(l[1].index, 0);  // ps 0
  EXPECT_EQ(l[3].index, 1);  // ps 1
  // 2 nodes × 4 ranks, 3 ps: node 0 gets ranks 3 and 2, node 1 rank 7.
  EXPECT_EQ(ps_ranks_of(compute_layout(packed({4, 4}), 3)), (std::vector<int>{2, 3, 7}));
}

TEST(ComputeLayout, UnevenNodes) {
  // node 0 = {0,1,2}, node 1 = {3}: the single-rank node gets the second ps before node 0 gets
  // its second; the third goes back to node 0.
  EXPECT_EQ(ps_ranks_of(compute_layout(packed({3, 1}), 1)), (std::vector<int>{2}));
  EXPECT_EQ(ps_ranks_of(compute_layout(packed({3, 1}), 2)), (std::vector<int>{2, 3}));
  EXPECT_EQ(ps_ranks_of(compute_layout(packed({3, 1}), 3)), (std::vector<int>{1, 2, 3}));
  // node 0 = {0}, node 1 = {1,2,3,4}: node 0 is full after one ps, the rest go to node 1.
  EXPECT_EQ(ps_ranks_of(compute_layout(packed({1, 4}), 3)), (std::vector<int>{0, 3, 4}));
  const auto l = compute_layout(packed({1, 4}), 3);
  EXPECT_EQ(l[1].role, Role::worker);
  EXPECT_EQ(l[1].index, 0);  // the chief is the lowest-ranked worker, here rank 1
}

TEST(ComputeLayout, InterleavedRanks) {
  // Ranks dealt round-robin: node 0 = {0,2,4}, node 1 = {1,3,5}.
  EXPECT_EQ(ps_ranks_of(compute_layout(interleaved(6, 2), 1)), (std::vector<int>{4}));
  EXPECT_EQ(ps_ranks_of(compute_layout(interleaved(6, 2), 2)), (std::vector<int>{4, 5}));
  EXPECT_EQ(ps_ranks_of(compute_layout(interleaved(6, 2), 3)), (std::vector<int>{2, 4, 5}));
}

TEST(ComputeLayout, PropertiesOverManyLayouts) {
  std::vector<std::vector<int>> layouts;
  for (int nodes = 1; nodes <= 4; ++nodes)
    for (int per = 1; per <= 4; ++per) layouts.push_back(packed(std::vector<int>(nodes, per)));
  for (const auto& sizes : std::vector<std::vector<int>>{
           {3, 1}, {1, 3}, {2, 5, 1}, {1, 1, 6}, {4, 2, 2, 1}, {5, 1, 1, 1, 1}, {1, 2, 3, 4}})
    layouts.push_back(packed(sizes));
  for (int world = 2; world <= 9; ++world)
    for (int nodes = 2; nodes <= 3; ++nodes) layouts.push_back(interleaved(world, nodes));
  int checked = 0;
  for (const auto& layout : layouts) {
    const int world = static_cast<int>(layout.size());
    for (int k = 0; k < world; ++k) {
      check_layout_properties(layout, k);
      ++checked;
    }
  }
  EXPECT_GT(checked, 150);
}

TEST(ComputeLayout, RejectsTooManyOrNegativePs) {
  for (int world = 1; world <= 5; ++world) {
    for (int k : {world, world + 1, world + 7}) {
      try {
        compute_layout(packed({world}), k);
        ADD_FAILURE() << "num_ps " << k << " of world " << world << " accepted";
      } catch (const InputError& e) {
        EXPECT_NE(std::string(e.what()).find("--num-ps"), std::string::npos) << e.what();
      }
    }
  }
  EXPECT_THROW(compute_layout(packed({4}), -1), InputError);
}

TEST(ShardRanges, CoverContiguouslyAndBalanced) {
  int checked = 0;
  for (std::size_t total : {1u, 2u, 3u, 7u, 10u, 64u, 100u, 101u, 1000u, 4099u, 123457u}) {
    for (int k = 1; k <= 9; ++k) {
      if (static_cast<std::size_t>(k) > total) continue;
      const auto s = shard_ranges(total, k);
      ASSERT_EQ(static_cast<int>(s.size()), k);
      EXPECT_EQ(s.front().begin, 0u);
      EXPECT_EQ(s.back().end, total);
      std::size_t lo = total, hi = 0, sum = 0;
      for (int i = 0; i < k; ++i) {
        if (i > 0) EXPECT_EQ(s[i].begin, s[i - 1].end) << "total " << total << " K " << k;
        EXPECT_GE(s[i].size(), 1u);
        lo = std::min(lo, s[i].size());
        hi = std::max(hi, s[i].size());
        sum += s[i].size();
      }
      EXPECT_EQ(sum, total);
      EXPECT_LE(hi - lo, 1u) << "total " << total << " K " << k;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 76);  // 11 totals × K = 1..9, minus the 23 pairs with K > total
}

TEST(ShardRanges, ErrorsNameTheOption) {
  for (auto [total, k] :
       std::vector<std::pair<std::size_t, int>>{{3, 4}, {0, 1}, {10, 0}, {10, -2}}) {
    try {
      shard_ranges(total, k);
      ADD_FAILURE() << "shard_ranges(" << total << ", " << k << ") accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("--num-ps"), std::string::npos) << e.what();
    }
  }
}

/// Segments of the given sizes, contiguous from 0 (adapt flags do not matter to the cut).
std::vector<ParamSegment> segments_of(const std::vector<std::size_t>& sizes) {
  std::vector<ParamSegment> out;
  std::size_t at = 0;
  for (std::size_t n : sizes) {
    out.push_back({at, at + n, true});
    at += n;
  }
  return out;
}

/// The smallest largest part over every cut of `sizes` into k runs (exhaustive: small inputs).
std::size_t best_max(const std::vector<std::size_t>& sizes, std::size_t from, int k) {
  const std::size_t rest = std::accumulate(sizes.begin() + static_cast<std::ptrdiff_t>(from),
                                           sizes.end(), std::size_t{0});
  if (k == 1) return rest;
  std::size_t best = SIZE_MAX, head = 0;
  for (std::size_t j = from; j + static_cast<std::size_t>(k) <= sizes.size(); ++j) {
    head += sizes[j];
    best = std::min(best, std::max(head, best_max(sizes, j + 1, k - 1)));
  }
  return best;
}

// LARS/LAMB in the ps modes: K runs of whole tensors tiling the buffer, every run non-empty, its
// ends at tensor boundaries, the largest as small as any such cut allows (checked against an
// exhaustive search over every cut of 60 pseudo-random tensor tables), the same table on every
// call.
TEST(TensorShardRanges, WholeTensorsAndTheSmallestLargestShard) {
  std::uint64_t state = 12345;
  auto next = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return static_cast<std::size_t>(state >> 33);
  };
  int checked = 0;
  for (int table = 0; table < 60; ++table) {
    std::vector<std::size_t> sizes(2 + next() % 9);
    for (std::size_t& n : sizes) n = 1 + next() % (next() % 2 ? 2000 : 30);
    const std::vector<ParamSegment> segs = segments_of(sizes);
    for (int k = 1; k <= static_cast<int>(sizes.size()); ++k) {
      const std::vector<ShardRange> s = tensor_shard_ranges(segs, k);
      ASSERT_EQ(static_cast<int>(s.size()), k);
      std::size_t at = 0, largest = 0;
      for (const ShardRange& r : s) {
        EXPECT_EQ(r.begin, at);
        EXPECT_GT(r.end, r.begin);
        EXPECT_TRUE(std::any_of(segs.begin(), segs.end(),
                                [&](const ParamSegment& g) { return g.end == r.end; }))
            << "shard end " << r.end << " inside a tensor";
        largest = std::max(largest, r.size());
        at = r.end;
      }
      EXPECT_EQ(at, segs.back().end);
      EXPECT_EQ(largest, best_max(sizes, 0, k)) << "table " << table << " K " << k;
      const std::vector<ShardRange> again = tensor_shard_ranges(segs, k);
      for (int i = 0; i < k; ++i) EXPECT_EQ(again[i].end, s[i].end);
      ++checked;
    }
  }
  EXPECT_GT(checked, 200);
  // A hand-checked table: conv 432 | bn 16 | bn 16 | dense 5408 | bias 10 over 2 and 3 ps.
  const auto segs = segments_of({432, 16, 16, 5408, 10});
  const auto two = tensor_shard_ranges(segs, 2);
  EXPECT_EQ(two[0].end, 464u);  // the dense weight alone outweighs the rest: it gets a ps
  EXPECT_EQ(two[1].end, 5882u);
  const auto three = tensor_shard_ranges(segs, 3);  // the dense weight alone: 5408 floats
  EXPECT_EQ(three[0].end, 464u);
  EXPECT_EQ(three[1].end, 5872u);
  const auto five = tensor_shard_ranges(segs, 5);  // one tensor each
  for (std::size_t i = 0; i < 5; ++i) EXPECT_EQ(five[i].end, segs[i].end);
}

TEST(TensorShardRanges, MorePsThanTensorsNamesTheOptionAndTheCounts) {
  const auto segs = segments_of({10, 20, 30});
  for (int k : {4, 7, 0, -1}) {
    try {
      tensor_shard_ranges(segs, k);
      ADD_FAILURE() << "K " << k << " accepted";
    } catch (const InputError& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("--num-ps: " + std::to_string(k) + " parameter servers"), std::string::npos)
          << m;
      EXPECT_NE(m.find("3 parameter tensors"), std::string::npos) << m;
    }
  }
  EXPECT_THROW(tensor_shard_ranges({}, 1), InputError);
  EXPECT_THROW(tensor_shard_ranges({{0, 4, true}, {5, 9, true}}, 1), InputError);  // a gap
}

// The table every rank builds: floats for the elementwise optimizers, whole tensors for LARS.
TEST(TensorShardRanges, PsShardRangesFollowsTheOptimizer) {
  const std::vector<TensorInfo> t =
      test::tensor_table({{"0.conv.weight", 90}, {"0.conv.bias", 10}});
  Config c;
  c.optimizer = OptimizerKind::momentum;
  EXPECT_EQ(ps_shard_ranges(c, t, 100, 2)[0].end, 50u);
  for (OptimizerKind k : {OptimizerKind::lars, OptimizerKind::lamb}) {
    c.optimizer = k;
    EXPECT_EQ(ps_shard_ranges(c, t, 100, 2)[0].end, 90u);
    EXPECT_THROW(ps_shard_ranges(c, t, 100, 3), InputError);
  }
}

// A pipelined ps job: the ps cut into one group per stage (in stage order, extra ps to the stage
// with the most floats per ps), each group splitting its stage's range as shard_ranges() does;
// together the shards tile the whole buffer.
TEST(StageShards, EachStageSplitOverItsOwnPs) {
  const std::vector<std::size_t> params{60, 12, 5208, 100};
  for (int k = 4; k <= 9; ++k) {
    const std::vector<StageShard> s = stage_shards(params, k);
    ASSERT_EQ(static_cast<int>(s.size()), k);
    std::size_t at = 0, first = 0;
    std::vector<int> per_stage(params.size(), 0);
    for (std::size_t i = 0; i < s.size(); ++i) {
      if (i > 0) EXPECT_GE(s[i].stage, s[i - 1].stage);
      if (i > 0 && s[i].stage != s[i - 1].stage) first = at;
      EXPECT_EQ(s[i].range.begin, at);
      EXPECT_EQ(s[i].range.begin - first, s[i].local.begin);
      EXPECT_EQ(s[i].range.size(), s[i].local.size());
      at = s[i].range.end;
      ++per_stage[static_cast<std::size_t>(s[i].stage)];
    }
    EXPECT_EQ(at, 5380u);
    EXPECT_EQ(per_stage[0] + per_stage[1] + per_stage[3], 3) << "K " << k;  // extras: stage 2
    for (std::size_t st = 0; st < params.size(); ++st) {
      std::vector<ShardRange> local;
      for (const StageShard& x : s)
        if (x.stage == static_cast<int>(st)) local.push_back(x.local);
      const auto want = shard_ranges(params[st], per_stage[st]);
      ASSERT_EQ(local.size(), want.size());
      for (std::size_t j = 0; j < want.size(); ++j) {
        EXPECT_EQ(local[j].begin, want[j].begin);
        EXPECT_EQ(local[j].end, want[j].end);
      }
    }
  }
  // Equal stages share the extras in stage order; P = 1 is shard_ranges itself.
  const auto even = stage_shards({100, 100}, 3);
  EXPECT_EQ(even[0].stage, 0);
  EXPECT_EQ(even[1].stage, 0);
  EXPECT_EQ(even[2].stage, 1);
  const auto one = stage_shards({101}, 3);
  const auto plain = shard_ranges(101, 3);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(one[k].range.end, plain[k].end);
}

TEST(StageShards, ErrorsNameTheOptionAndTheStage) {
  auto message = [](const std::vector<std::size_t>& params, int k) {
    try {
      stage_shards(params, k);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const std::string few = message({10, 10, 10}, 2);
  EXPECT_NE(few.find("--num-ps 2"), std::string::npos) << few;
  EXPECT_NE(few.find("--pipeline-stages 3"), std::string::npos) << few;
  const std::string empty = message({10, 0, 10}, 3);
  EXPECT_NE(empty.find("pipeline stage 1 has no parameters"), std::string::npos) << empty;
  const std::string tiny = message({1, 1}, 3);
  EXPECT_NE(tiny.find("--num-ps 3"), std::string::npos) << tiny;
}

// LARS/LAMB in a pipelined ps job: each stage's ps cut at that stage's tensor boundaries, a stage
// never given more ps than it has tensors. Stage 0 holds tensors 40 | 10 | 30 (80 floats), stage 1
// 100 | 5 | 60 | 20 (185 floats); the cut points for K = 2..7, worked by hand: extra ps by floats
// per ps (K = 3, 4: stage 1; K = 5: stage 0; K = 6: stage 1), each stage's run of tensors cut with
// the smallest largest shard; at K = 7 stage 1 has a ps per tensor, so the extra goes to stage 0
// (the float split would give stage 1 a fifth: 185/4 > 80/2).
TEST(StageShards, LayerwiseCutsEachStageAtItsTensorBoundaries) {
  const std::vector<std::size_t> params{80, 185};
  const std::vector<ParamSegment> segs = segments_of({40, 10, 30, 100, 5, 60, 20});
  const std::map<int, std::vector<std::size_t>> ends{{2, {80, 265}},
                                                     {3, {80, 180, 265}},
                                                     {4, {80, 180, 245, 265}},
                                                     {5, {40, 80, 180, 245, 265}},
                                                     {6, {40, 80, 180, 185, 245, 265}},
                                                     {7, {40, 50, 80, 180, 185, 245, 265}}};
  for (const auto& [k, want] : ends) {
    const std::vector<StageShard> s = stage_shards(params, k, segs);
    ASSERT_EQ(s.size(), want.size()) << "K " << k;
    std::size_t at = 0;
    for (std::size_t i = 0; i < s.size(); ++i) {
      const std::size_t first = s[i].stage == 0 ? 0 : 80;
      EXPECT_EQ(s[i].stage, s[i].range.end <= 80 ? 0 : 1) << "K " << k << " ps " << i;
      EXPECT_EQ(s[i].range.begin, at) << "K " << k << " ps " << i;
      EXPECT_EQ(s[i].range.end, want[i]) << "K " << k << " ps " << i;
      EXPECT_EQ(s[i].local.begin, s[i].range.begin - first);
      EXPECT_EQ(s[i].local.end, s[i].range.end - first);
      at = s[i].range.end;
    }
  }
  // The elementwise optimizers split floats: at K = 7 stage 1 gets 5 ps, one inside a tensor.
  int stage1 = 0;
  for (const StageShard& x : stage_shards(params, 7)) stage1 += x.stage;
  EXPECT_EQ(stage1, 5);
}

TEST(StageShards, LayerwiseErrorsNameTheOptionAndTheCounts) {
  auto message = [](const std::vector<std::size_t>& params, int k,
                    const std::vector<ParamSegment>& segs) {
    try {
      stage_shards(params, k, segs);
    } catch (const InputError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  const auto segs = segments_of({40, 10, 30, 100, 5, 60, 20});
  const std::string many = message({80, 185}, 8, segs);
  EXPECT_NE(many.find("--num-ps: 8 parameter servers"), std::string::npos) << many;
  EXPECT_NE(many.find("7 parameter tensors (3, 4 by stage)"), std::string::npos) << many;
  const std::string few = message({80, 185}, 1, segs);  // the stage count comes first
  EXPECT_NE(few.find("--num-ps >= --pipeline-stages"), std::string::npos) << few;
  const std::string empty = message({265, 0}, 2, segs);
  EXPECT_NE(empty.find("pipeline stage 1 has no parameters"), std::string::npos) << empty;
  const std::string cross = message({60, 205}, 2, segs);  // a stage boundary inside 30
  EXPECT_NE(cross.find("crosses the start of pipeline stage 1"), std::string::npos) << cross;
  const std::string short_ = message({80, 100}, 2, segs);  // tensors past the last stage
  EXPECT_NE(short_.find("do not tile"), std::string::npos) << short_;
}

// ps/protocol.hpp: chunks tile a part exactly, in order, each at most the limit; large parts get
// ~8 chunks, none below kMinChunkBytes unless the limit is lower; a 3 GiB part (past 2 GiB, the
// old single-message limit) is chunks of at most the limit.
TEST(ChunkLayout, TilesThePartWithinTheLimit) {
  const std::size_t kMin = kMinChunkBytes / sizeof(float);
  const std::size_t three_gib = (std::size_t{3} << 30) / sizeof(float);
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{255}, std::size_t{1003}, kMin,
                        8 * kMin, 8 * kMin + 1, std::size_t{4} << 20, three_gib}) {
    for (std::size_t limit : {std::size_t{1}, std::size_t{4}, std::size_t{1024},
                              std::size_t{1} << 20, kDefaultChunkBytes, std::size_t{1} << 30}) {
      const ChunkLayout c(n, limit);
      SCOPED_TRACE("n " + std::to_string(n) + " limit " + std::to_string(limit));
      EXPECT_LE(c.per * sizeof(float), std::max(limit, sizeof(float)));
      EXPECT_EQ(c.count(), n == 0 ? 0 : (n + c.per - 1) / c.per);
      EXPECT_EQ(c.largest(), n > 0 ? c.size(0) : 1u) << "largest() is the first chunk";
      if (n > 0) {
        EXPECT_EQ(c.begin(c.count() - 1) + c.size(c.count() - 1), n) << "the chunks end at n";
        EXPECT_GE(c.size(c.count() - 1), 1u);
      }
      if (c.count() <= 4) {  // cheap enough to check every chunk
        for (std::size_t i = 0; i + 1 < c.count(); ++i) {
          EXPECT_EQ(c.size(i), c.per);
          EXPECT_EQ(c.begin(i + 1), c.begin(i) + c.size(i));
        }
      }
      if (limit / sizeof(float) >= kMin) EXPECT_GE(c.per, std::min(n, kMin)) << "no tiny chunks";
      if (n >= 8 * kMin && limit / sizeof(float) >= (n + 7) / 8) EXPECT_EQ(c.count(), 8u);
    }
  }
  EXPECT_EQ(ChunkLayout(1003, 1024).count(), 4u);  // 256 + 256 + 256 + 235
  EXPECT_EQ(ChunkLayout(1003, 1024).size(3), 235u);
  EXPECT_EQ(ChunkLayout(three_gib, kDefaultChunkBytes).count(), 3072u);  // 1 MiB chunks
}

}  // namespace
}  // namespace dtrain
