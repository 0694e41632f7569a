// Tests of the pure parts of `ckptfs verify` (fs/verify_command.h): the backing directory of a
// mount, the exit status, the MiB ranges it names.
#include "fs/verify_command.h"

#include <gtest/gtest.h>

namespace ckptfs {
namespace {

TEST(VerifyCommandTest, ACkptfsMountsBackingDirectoryIsItsFsnameAfterCkptfs) {
  EXPECT_EQ(BackingDirOf({"0:40", "/mnt", "fuse.ckptfs", "ckptfs:/data/a b", "rw"}), "/data/a b");
  EXPECT_EQ(BackingDirOf({"0:40", "/mnt", "fuse.ckptfs", "mine", "rw"}), std::nullopt);
  EXPECT_EQ(BackingDirOf({"0:40", "/mnt", "fuse.ckptfs", "ckptfs:", "rw"}), std::nullopt);
  EXPECT_EQ(BackingDirOf({"0:41", "/mnt", "fuse.other", "ckptfs:/data", "rw"}), std::nullopt);
}

TEST(VerifyCommandTest, AMismatchOrAnUnreadableFileExits1BeforeAMissingRecordExits2) {
  EXPECT_EQ(VerifyExitStatus({}), 0);
  EXPECT_EQ(VerifyExitStatus({.ok = 3}), 0);
  EXPECT_EQ(VerifyExitStatus({.ok = 3, .no_checksum = 1}), 2);
  EXPECT_EQ(VerifyExitStatus({.no_checksum = 1, .not_durable = 1}), 2);
  EXPECT_EQ(VerifyExitStatus({.mismatch = 1, .no_checksum = 1}), 1);
  EXPECT_EQ(VerifyExitStatus({.error = 1}), 1);
}

TEST(VerifyCommandTest, MiBRangesCoverEveryMiBTheBytesTouch) {
  constexpr uint64_t MiB = uint64_t{1} << 20;
  EXPECT_EQ(MiBRange(16 * MiB, 24 * MiB), "16-24");
  EXPECT_EQ(MiBRange(16 * MiB, 20 * MiB + 1), "16-21");
  EXPECT_EQ(MiBRange(0, 5000), "0-1");
}

}  // namespace
}  // namespace ckptfs
