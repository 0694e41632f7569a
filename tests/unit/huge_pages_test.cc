// Which kernel settings give the cache's shared memory huge pages, and how mountinfo is read.
#include "fs/huge_pages.h"

#include <gtest/gtest.h>

#include "fs/mount_info.h"

namespace ckptfs {
namespace {

TEST(HugePagesTest, TheSelectedWordOfAKernelSettingIsTheBracketedOne) {
  EXPECT_EQ(SelectedWord("always within_size advise [never] deny force"), "never");
  EXPECT_EQ(SelectedWord("[always] madvise never"), "always");
  EXPECT_EQ(SelectedWord("always madvise never"), "");
  EXPECT_EQ(SelectedWord(""), "");
}

TEST(HugePagesTest, ATmpfsGivesHugePagesByItsHugeOptionUnlessShmemEnabledOverrides) {
  EXPECT_FALSE(TmpfsGivesHugePages("rw,size=24683664k", "never"));
  EXPECT_FALSE(TmpfsGivesHugePages("rw,size=24683664k", "advise"));
  EXPECT_FALSE(TmpfsGivesHugePages("rw,size=1g,huge=never", "always"));
  EXPECT_TRUE(TmpfsGivesHugePages("rw,size=1g,huge=advise", "never"));
  EXPECT_TRUE(TmpfsGivesHugePages("rw,huge=within_size,nr_inodes=10", "never"));
  EXPECT_TRUE(TmpfsGivesHugePages("rw,huge=always", "never"));
  EXPECT_FALSE(TmpfsGivesHugePages("rw,huge=advise", "deny"));
  EXPECT_TRUE(TmpfsGivesHugePages("rw", "force"));
}

TEST(HugePagesTest, AMemfdFollowsShmemEnabledOrTheTwoMegabyteSizesOwnSetting) {
  EXPECT_FALSE(MemfdGivesHugePages("never", ""));
  EXPECT_FALSE(MemfdGivesHugePages("never", "inherit"));
  EXPECT_TRUE(MemfdGivesHugePages("advise", "inherit"));
  EXPECT_TRUE(MemfdGivesHugePages("within_size", ""));
  EXPECT_TRUE(MemfdGivesHugePages("never", "advise"));
  EXPECT_FALSE(MemfdGivesHugePages("advise", "never"));
  EXPECT_FALSE(MemfdGivesHugePages("deny", "always"));
  EXPECT_TRUE(MemfdGivesHugePages("force", "never"));
}

TEST(MountInfoTest, EntriesGiveDeviceUnescapedPointTypeSourceAndFilesystemOptions) {
  const std::vector<MountEntry> entries = ParseMountInfo(
      "25 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
      "27 25 0:26 / /dev/shm rw,nosuid,nodev shared:4 master:2 - tmpfs tmpfs "
      "rw,size=1048576k,huge=advise\n"
      "malformed line\n"
      "40 25 0:40 / /mnt/with\\040space\\134 rw - fuse.ckptfs ckptfs:/data\\040x rw,user_id=0\n");
  ASSERT_EQ(entries.size(), 3u);
  EXPECT_EQ(entries[0].device, "254:0");
  EXPECT_EQ(entries[0].fs_type, "ext4");
  EXPECT_EQ(entries[1].mount_point, "/dev/shm");
  EXPECT_EQ(entries[1].fs_type, "tmpfs");
  EXPECT_EQ(OptionValue(entries[1].super_options, "huge"), "advise");
  EXPECT_EQ(OptionValue(entries[1].super_options, "size"), "1048576k");
  EXPECT_EQ(OptionValue(entries[1].super_options, "hug"), "");
  EXPECT_EQ(entries[2].mount_point, "/mnt/with space\\");
  EXPECT_EQ(entries[2].fs_type, "fuse.ckptfs");
  EXPECT_EQ(entries[2].source, "ckptfs:/data x");
  EXPECT_EQ(entries[0].source, "/dev/vda");
}

TEST(MountInfoTest, ThisProcessSeesItsRootMount) {
  bool root = false;
  for (const MountEntry& m : ReadMountInfo()) root = root || m.mount_point == "/";
  EXPECT_TRUE(root);
}

}  // namespace
}  // namespace ckptfs
