// dtrain/ps/sharding.hpp — which parameter-server rank owns which floats of the flat parameter
// buffer. The buffer is cut into K contiguous ranges whose sizes differ by at most one float
// (balanced by bytes), ignoring tensor boundaries: a tensor larger than its fair share is split
// over several ps, small tensors share a ps. Every rank computes the same table from the model,
// so no negotiation is needed (ps-lite's range partition of keys). A layer-wise optimizer
// (--optimizer lars | lamb: a trust ratio per tensor) cuts at tensor boundaries instead, the
// largest shard as small as whole tensors allow (tensor_shard_ranges). A pipelined job cuts the
// ps into one group per stage, each splitting its stage's range (stage_shards; at the stage's
// tensor boundaries for LARS/LAMB).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "dtrain/core/config.hpp"
#include "dtrain/dnn/backend.hpp"
#include "dtrain/model/model.hpp"

namespace dtrain {

struct ShardRange {
  std::size_t begin = 0;  ///< first float (inclusive)
  std::size_t end = 0;    ///< one past the last float
  [[nodiscard]] std::size_t size() const { return end - begin; }
};

/// K balanced contiguous ranges covering [0, total). Throws InputError when num_ps < 1 or
/// num_ps > total (a ps must own at least one parameter).
std::vector<ShardRange> shard_ranges(std::size_t total, int num_ps);

/// K contiguous ranges covering [0, segments.back().end), each a run of whole segments (one per
/// tensor, as param_segments() lists them; a tensor is never split), the largest as small as
/// such a cut allows (the linear partition that minimises the maximum: a binary search on it
/// with a greedy fill, then parts split at their most balanced boundary until there are K).
/// Deterministic: every rank computes the same table. Throws InputError naming --num-ps and both
/// counts when num_ps < 1 or num_ps > segments.size() (a ps must own at least one tensor), and
/// for segments that are empty or not contiguous from 0.
std::vector<ShardRange> tensor_shard_ranges(const std::vector<ParamSegment>& segments, int num_ps);

/// The shard table of a ps job of `total` floats with the model's `tensors`: tensor_shard_ranges()
/// of param_segments() for a layer-wise c.optimizer (lars, lamb), else shard_ranges(). Every rank,
/// ps and worker, uses this one. Throws InputError as those do.
std::vector<ShardRange> ps_shard_ranges(const Config& c, const std::vector<TensorInfo>& tensors,
                                        std::size_t total, int num_ps);

/// One ps of a pipelined job (--pipeline-stages P with a ps mode): the stage it serves, its range
/// of the whole model's flat buffer, and the same range in the stage's own buffer.
struct StageShard {
  int stage = 0;
  ShardRange range;  ///< in the whole model's flat buffer
  ShardRange local;  ///< in stage `stage`'s flat buffer (range minus the stage's first float)
};

/// The ps of a pipelined job: stage s owns the floats [Σ_{t<s} stage_params[t], + stage_params[s])
/// of the flat buffer (a stage's layers are contiguous, so are their parameters). The num_ps ps
/// are cut into P = stage_params.size() groups in stage order — one ps per stage, every further ps
/// to the stage with the most floats per ps (ties: the earlier stage) — and each stage's range is
/// split over its group as shard_ranges() splits the whole buffer. With `tensors` (a layer-wise
/// optimizer: the whole model's param_segments(), tiling the stages' floats) every ps holds whole
/// tensors: a stage gets at most one ps per tensor of its own (further ps go to the next stage by
/// floats per ps) and its range is cut by tensor_shard_ranges() of its tensors. Returns num_ps
/// entries, ps k's at k. Throws InputError naming --num-ps and --pipeline-stages when num_ps < P,
/// naming the stage when a stage has no parameters (its ps would own nothing) or fewer floats than
/// its ps, and (with `tensors`) naming --num-ps and the tensor counts by stage when num_ps exceeds
/// the tensors, or when a tensor crosses a stage boundary.
std::vector<StageShard> stage_shards(const std::vector<std::size_t>& stage_params, int num_ps,
                                     const std::vector<ParamSegment>& tensors = {});

/// One line per ps: its float range, bytes, and the tensors (or parts) it holds; with `stage_of`
/// (one stage per ps, a pipelined job) also the stage each ps serves.
std::string describe_shards(const std::vector<ShardRange>& shards,
                            const std::vector<TensorInfo>& tensors,
                            const std::vector<int>& stage_of = {});

}  // namespace dtrain
