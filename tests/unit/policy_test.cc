// Tests of the pure flush-policy functions.
#include "core/policy.h"

#include <gtest/gtest.h>

namespace ckptfs::policy {
namespace {

using std::chrono::milliseconds;

TEST(PolicyTest, BatchesTakeAQuarterOfTheDescriptorsBetween16And1024Entries) {
  EXPECT_EQ(MaxBatchEntries(1024), 256u);
  EXPECT_EQ(MaxBatchEntries(1u << 20), kMaxBatchEntries);
  EXPECT_EQ(MaxBatchEntries(UINT64_MAX), kMaxBatchEntries);
  EXPECT_EQ(MaxBatchEntries(40), 16u);
}

TEST(PolicyTest, RetryDelayDoublesFrom100msAndCapsAt5s) {
  EXPECT_EQ(RetryDelay(0), milliseconds(100));
  EXPECT_EQ(RetryDelay(1), milliseconds(100));
  EXPECT_EQ(RetryDelay(2), milliseconds(200));
  EXPECT_EQ(RetryDelay(3), milliseconds(400));
  EXPECT_EQ(RetryDelay(4), milliseconds(800));
  EXPECT_EQ(RetryDelay(5), milliseconds(1600));
  EXPECT_EQ(RetryDelay(6), milliseconds(3200));
  EXPECT_EQ(RetryDelay(7), milliseconds(5000));
  EXPECT_EQ(RetryDelay(100), milliseconds(5000));
  EXPECT_EQ(RetryDelay(~0u), milliseconds(5000));
  for (unsigned f = 1; f < 64; ++f) EXPECT_LE(RetryDelay(f), RetryDelay(f + 1)) << f;
}

TEST(PolicyTest, NextHoldGrowsForFilesRewrittenSoonAndResetsForQuietOnes) {
  using namespace std::chrono_literals;
  const auto base = std::chrono::duration_cast<std::chrono::steady_clock::duration>(300ms);
  auto hold = NextHold({}, 1h, base);
  EXPECT_EQ(hold, base) << "a first seal waits flush_delay";
  hold = NextHold(hold, 100ms, base);
  EXPECT_EQ(hold, 2 * base);
  for (int i = 0; i < 10; ++i) hold = NextHold(hold, 100ms, base);
  EXPECT_EQ(hold, 16 * base) << "capped";
  EXPECT_EQ(NextHold(hold, 2 * hold, base), base) << "left alone long enough: starts over";
  EXPECT_EQ(NextHold(hold, 2 * hold - 1ms, base), 16 * base);
  const std::chrono::steady_clock::duration zero{};
  EXPECT_EQ(NextHold(zero, 0ms, zero), zero) << "flush_delay=0 flushes at once";
}

TEST(PolicyTest, IsTransient) {
  for (int err : {ENOSPC, EIO, EDQUOT, EAGAIN, EINTR, ENOMEM, ETIMEDOUT}) {
    EXPECT_TRUE(IsTransient(err)) << err;
  }
  for (int err : {0, ENOENT, EEXIST, ENOTEMPTY, ENOTDIR, EISDIR, EINVAL, ENAMETOOLONG, ELOOP,
                  EXDEV, EMLINK, EPERM}) {
    EXPECT_FALSE(IsTransient(err)) << err;
  }
}

TEST(PolicyTest, FlushEverythingNow) {
  EXPECT_FALSE(FlushEverythingNow(0, false, false));
  EXPECT_TRUE(FlushEverythingNow(1, false, false));
  EXPECT_TRUE(FlushEverythingNow(0, true, false));
  EXPECT_TRUE(FlushEverythingNow(0, false, true));
}

}  // namespace
}  // namespace ckptfs::policy
