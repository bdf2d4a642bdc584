// tests/common/gpu.hpp — how GPU tests skip: with the reason (the CUDA runtime's own error when a
// CUDA build sees no device), and never silently on a machine meant to have a GPU: with
// DTRAIN_REQUIRE_GPU=1 in the environment every "no GPU" skip is a test failure instead.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "dtrain/dnn/backend.hpp"

namespace dtrain::testing {

/// True when DTRAIN_REQUIRE_GPU=1: a missing GPU fails GPU tests instead of skipping them.
inline bool gpu_required() {
  const char* v = std::getenv("DTRAIN_REQUIRE_GPU");
  return v != nullptr && std::strcmp(v, "1") == 0;
}

}  // namespace dtrain::testing

/// In a test body or SetUp(): skip (or, with DTRAIN_REQUIRE_GPU=1, fail) when no GPU is usable.
#define DT_SKIP_WITHOUT_CUDA()                                                      \
  do {                                                                              \
    const std::string reason_ = ::dtrain::cuda_unavailable_reason();                \
    if (!reason_.empty()) {                                                         \
      if (::dtrain::testing::gpu_required())                                        \
        FAIL() << "DTRAIN_REQUIRE_GPU=1 but no CUDA device is usable: " << reason_; \
      GTEST_SKIP() << "no CUDA device: " << reason_;                                \
    }                                                                               \
  } while (0)
