// tests/unit/test_nap.cpp — nap_us (core/log.hpp), the polling waits' back-off sleep: it sleeps at
// least the time asked, and it sets the calling thread's timer slack to kNapSlackNs — that
// thread's only (Linux keeps the slack per thread), so a thread that never naps keeps its own.
#include <gtest/gtest.h>
#include <sys/prctl.h>

#include <thread>

#include "dtrain/core/log.hpp"

namespace dtrain {
namespace {

long timer_slack_ns() { return prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0); }

TEST(Nap, SetsTheCallingThreadsTimerSlackAndSleepsAtLeastTheTimeAsked) {
  const long main_before = timer_slack_ns();
  long before = 0, after = 0;
  double slept = 0;
  std::thread napper([&] {
    ASSERT_EQ(prctl(PR_SET_TIMERSLACK, 50000, 0, 0, 0), 0);  // Linux's default, made explicit
    before = timer_slack_ns();
    const double t0 = now_seconds();
    nap_us(300);
    slept = now_seconds() - t0;
    after = timer_slack_ns();
  });
  napper.join();
  EXPECT_EQ(before, 50000);
  EXPECT_EQ(after, static_cast<long>(kNapSlackNs));
  EXPECT_EQ(timer_slack_ns(), main_before);  // the thread that did not nap keeps its own
  EXPECT_GE(slept, 300e-6);
}

TEST(Nap, ZeroReturnsAndStillSetsTheSlack) {
  long after = 0;
  std::thread t([&] {
    nap_us(0);
    after = timer_slack_ns();
  });
  t.join();
  EXPECT_EQ(after, static_cast<long>(kNapSlackNs));
}

}  // namespace
}  // namespace dtrain
