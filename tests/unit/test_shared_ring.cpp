// tests/unit/test_shared_ring.cpp — the memfd segment a ps shares with the workers of its node
// (ps/shared_ring.hpp): what one mapping writes another reads, and a segment that is not the one
// a header names is refused with the reason, never mapped.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>

#include "dtrain/ps/shared_ring.hpp"

namespace dtrain {
namespace {

constexpr std::size_t kBytes = 4 * 1024 * sizeof(float);

TEST(SharedRing, SecondMappingThroughProcSeesTheSameMemory) {
  SharedRing ps = SharedRing::create(kBytes);
  ASSERT_EQ(ps.bytes(), kBytes);
  EXPECT_NE(ps.token(), 0);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(ps.data()) % 64, 0u);
  for (std::size_t i = 0; i < kBytes / sizeof(float); ++i) EXPECT_EQ(ps.data()[i], 0.0f) << i;
  std::string why;
  std::optional<SharedRing> worker = SharedRing::open(getpid(), ps.fd(), kBytes, ps.token(), &why);
  ASSERT_TRUE(worker.has_value()) << why;
  EXPECT_NE(worker->data(), ps.data()) << "a second mapping, not the same pointer";
  EXPECT_EQ(worker->token(), ps.token());
  worker->data()[7] = 3.5f;                                      // the worker writes a chunk ...
  EXPECT_EQ(ps.data()[7], 3.5f);                                 // ... the ps reads it,
  ps.data()[kBytes / sizeof(float) - 1] = -2.0f;                 // writes the reply over it ...
  EXPECT_EQ(worker->data()[kBytes / sizeof(float) - 1], -2.0f);  // ... and the worker sees it
  SharedRing moved = std::move(*worker);
  EXPECT_EQ(moved.data()[7], 3.5f);
}

TEST(SharedRing, AnotherSegmentIsRefusedWithTheReason) {
  SharedRing ps = SharedRing::create(kBytes);
  std::string why;
  EXPECT_FALSE(SharedRing::open(getpid(), ps.fd(), kBytes, ps.token() + 1, &why).has_value());
  EXPECT_NE(why.find("token"), std::string::npos) << why;
  why.clear();
  EXPECT_FALSE(SharedRing::open(getpid(), ps.fd(), 2 * kBytes, ps.token(), &why).has_value());
  EXPECT_NE(why.find("expected"), std::string::npos) << why;
  why.clear();
  EXPECT_FALSE(SharedRing::open(getpid(), 1 << 20, kBytes, ps.token(), &why).has_value());
  EXPECT_NE(why.find("/proc/" + std::to_string(getpid()) + "/fd/"), std::string::npos) << why;
}

}  // namespace
}  // namespace dtrain
