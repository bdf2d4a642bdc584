// dtrain/core/synthetic_spec.cpp — parse_synthetic_spec() (core/synthetic_spec.hpp).
#include "dtrain/core/synthetic_spec.hpp"

#include <charconv>
#include <cstdint>
#include <limits>

#include "dtrain/core/error.hpp"

namespace dtrain {

SyntheticSpec parse_synthetic_spec(const std::string& spec) {
  const std::string format = "expected CxHxW:classes with positive integers, e.g. 3x224x224:1000";
  auto fail = [&](const std::string& why) {
    throw InputError("option --synthetic '" + spec + "': " + why + (why.empty() ? "" : " (") +
                     format + (why.empty() ? "" : ")"));
  };
  int v[4] = {0, 0, 0, 0};
  const char* p = spec.data();
  const char* end = spec.data() + spec.size();
  const char seps[4] = {'x', 'x', ':', '\0'};
  for (int k = 0; k < 4; ++k) {
    const auto [next, ec] = std::from_chars(p, end, v[k]);
    if (ec != std::errc() || next == p) fail("");
    p = next;
    if (k < 3) {
      if (p == end || *p != seps[k]) fail("");
      ++p;
    }
  }
  if (p != end) fail("");
  for (int k = 0; k < 3; ++k)
    if (v[k] < 1 || v[k] > 65536) fail("image sizes must be in [1, 65536]");
  if (v[3] < 2 || v[3] > 1000000) fail("classes must be in [2, 1000000]");
  const auto floats = static_cast<std::int64_t>(v[0]) * v[1] * v[2];
  if (floats > std::numeric_limits<std::int32_t>::max())
    fail("a sample of " + std::to_string(floats) + " floats is too large, at most 2^31 - 1");
  return {v[0], v[1], v[2], v[3]};
}

}  // namespace dtrain
