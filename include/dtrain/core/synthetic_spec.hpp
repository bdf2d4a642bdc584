// dtrain/core/synthetic_spec.hpp — the value of --synthetic, "CxHxW:classes": random images and
// labels instead of data files (tf_cnn_benchmarks' synthetic data). The options' validation checks
// it with parse_synthetic_spec(); io/dataset.hpp's synthetic_dataset() turns it into a dataset.
#pragma once

#include <string>

namespace dtrain {

/// One synthetic sample's shape and the class count of "CxHxW:classes".
struct SyntheticSpec {
  int channels = 0, height = 0, width = 0;
  int classes = 0;
};

/// Parses "CxHxW:classes" (e.g. "3x224x224:1000"): decimal integers, sizes in [1, 65536], classes
/// in [2, 1000000], and a sample of at most 2^31 − 1 floats. Throws InputError naming --synthetic,
/// the spec and the expected format otherwise.
SyntheticSpec parse_synthetic_spec(const std::string& spec);

}  // namespace dtrain
