// dtrain/ps/sharding.hpp — which parameter-server rank owns which floats of the flat parameter
// buffer. The buffer is cut into K contiguous ranges whose sizes differ by at most one float
// (balanced by bytes), ignoring tensor boundaries: a tensor larger than its fair share is split
// over several ps, small tensors share a ps. Every rank computes the same table from the model,
// so no negotiation is needed (ps-lite's range partition of keys).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

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

/// One line per ps: its float range, bytes, and the tensors (or parts) it holds.
std::string describe_shards(const std::vector<ShardRange>& shards,
                            const std::vector<TensorInfo>& tensors);

}  // namespace dtrain
