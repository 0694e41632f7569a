// Tests of how the FUSE adapter tells that the process behind a request is being killed.
#include "fs/fatal_signal.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <string>

namespace ckptfs {
namespace {

constexpr const char* kStatus =
    "Name:\tdd\nState:\tS (sleeping)\nSigQ:\t0/63704\nSigPnd:\t%s\nShdPnd:\t%s\n"
    "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n";

std::string StatusWith(const char* private_pending, const char* shared_pending) {
  char text[512];
  std::snprintf(text, sizeof text, kStatus, private_pending, shared_pending);
  return text;
}

TEST(FatalSignalTest, SigkillPendingForTheThreadOrItsProcessIsSeen) {
  EXPECT_TRUE(SigkillPendingIn(StatusWith("0000000000000100", "0000000000000000")));
  EXPECT_TRUE(SigkillPendingIn(StatusWith("0000000000000000", "0000000000000100")));
  EXPECT_TRUE(SigkillPendingIn(StatusWith("0000000000004102", "0000000000000000")));
}

TEST(FatalSignalTest, OtherPendingSignalsBlockedOnesAndMalformedTextAreNotAKill) {
  // SIGINT (2) and SIGALRM (14) pending, SIGKILL only in the blocked set, which it cannot be in.
  EXPECT_FALSE(SigkillPendingIn(StatusWith("0000000000002002", "0000000000000000")));
  EXPECT_FALSE(SigkillPendingIn("Name:\tdd\nSigBlk:\t0000000000000100\n"));
  EXPECT_FALSE(SigkillPendingIn("Name:\tdd\nSigPnd:\tzz\nShdPnd:\n"));
  EXPECT_FALSE(SigkillPendingIn(""));
}

TEST(FatalSignalTest, ALiveThreadAndNoThreadAreNotBeingKilled) {
  EXPECT_FALSE(BeingKilled(gettid()));
  EXPECT_FALSE(BeingKilled(0));
}

}  // namespace
}  // namespace ckptfs
