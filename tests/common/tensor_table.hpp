// tests/common/tensor_table.hpp — a model's parameter-tensor table (TensorInfo: name, offset,
// count) from names and sizes, laid out back to back from offset 0, for optimizer tests that need
// no model.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "dtrain/model/model.hpp"

namespace dtrain::test {

/// One TensorInfo per (name, count), offsets consecutive from 0 in the given order.
inline std::vector<TensorInfo> tensor_table(
    const std::vector<std::pair<std::string, std::size_t>>& sizes) {
  std::vector<TensorInfo> t;
  std::size_t at = 0;
  for (const auto& [name, count] : sizes) {
    TensorInfo i;
    i.name = name;
    i.offset = at;
    i.count = count;
    at += count;
    t.push_back(i);
  }
  return t;
}

}  // namespace dtrain::test
