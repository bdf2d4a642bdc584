// dtrain/ps/sharding.cpp — balanced range partition of the flat parameter buffer.
#include "dtrain/ps/sharding.hpp"

#include <sstream>

#include "dtrain/core/error.hpp"

namespace dtrain {

std::vector<ShardRange> shard_ranges(std::size_t total, int num_ps) {
  DT_REQUIRE(num_ps >= 1,
             "option --num-ps: need at least one parameter server, got " + std::to_string(num_ps));
  DT_REQUIRE(static_cast<std::size_t>(num_ps) <= total,
             "option --num-ps: " + std::to_string(num_ps) +
                 " parameter servers but the model has only " + std::to_string(total) +
                 " parameters to split over them (each ps must own at least one)");
  std::vector<ShardRange> out(num_ps);
  const std::size_t base = total / num_ps, extra = total % num_ps;
  std::size_t at = 0;
  for (int k = 0; k < num_ps; ++k) {
    const std::size_t len = base + (static_cast<std::size_t>(k) < extra ? 1 : 0);
    out[k] = {at, at + len};
    at += len;
  }
  return out;
}

std::string describe_shards(const std::vector<ShardRange>& shards,
                            const std::vector<TensorInfo>& tensors) {
  std::ostringstream os;
  for (std::size_t k = 0; k < shards.size(); ++k) {
    const auto& s = shards[k];
    os << "# ps " << k << ": floats [" << s.begin << ", " << s.end << ") = " << s.size() * 4
       << " bytes:";
    for (const auto& t : tensors) {
      const std::size_t b = std::max(s.begin, t.offset), e = std::min(s.end, t.offset + t.count);
      if (b >= e) continue;
      os << " " << t.name;
      if (e - b != t.count) os << "[" << (b - t.offset) << ":" << (e - t.offset) << "]";
    }
    os << "\n";
  }
  return os.str();
}

}  // namespace dtrain
