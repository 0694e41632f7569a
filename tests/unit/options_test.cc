// Mount option parsing (fs/options.cc), without a mount.
#include "fs/options.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

namespace ckptfs {
namespace {

MountOptions Parsed(const std::string& list) {
  MountOptions o;
  Status st = ApplyMountOptions(list, &o);
  EXPECT_TRUE(st.ok()) << list << ": " << st.ToString();
  return o;
}

Status Refused(const std::string& list) {
  MountOptions o;
  return ApplyMountOptions(list, &o);
}

TEST(MountOptionsTest, EveryOptionOfTheTableIsParsedIntoItsSetting) {
  MountOptions o = Parsed(
      "cache_size=8G,prefault=on,flush_delay=2s,fsync=wait,queue_depth=128,flush_io=direct,"
      "passthrough=off,max_read=128K,direct_read=off,zarr_chunk=2M,log_level=debug,"
      "log_file=/tmp/ckptfs.log,unmount_timeout=500ms");
  EXPECT_EQ(o.config.cache_size, 8ull << 30);
  EXPECT_TRUE(o.config.prefault);
  EXPECT_EQ(o.config.flush_delay, std::chrono::milliseconds(2000));
  EXPECT_EQ(o.config.fsync_mode, FsyncMode::kWait);
  EXPECT_EQ(o.config.queue_depth, 128u);
  EXPECT_EQ(o.config.flush_io, FlushIo::kDirect);
  EXPECT_EQ(o.passthrough, Passthrough::kOff);
  EXPECT_EQ(o.max_read, 128u << 10);
  EXPECT_FALSE(o.direct_read);
  EXPECT_EQ(o.config.zarr_chunk, 2ull << 20);
  EXPECT_EQ(o.log_level, "debug");
  EXPECT_EQ(o.log_file, "/tmp/ckptfs.log");
  EXPECT_EQ(o.config.unmount_retry, std::chrono::milliseconds(500));
}

TEST(MountOptionsTest, DefaultsAreWhatTheTableSays) {
  MountOptions o;
  EXPECT_EQ(o.config.fsync_mode, FsyncMode::kDefer);
  EXPECT_EQ(o.config.flush_delay, std::chrono::milliseconds(300));
  EXPECT_EQ(o.config.queue_depth, 64u);
  EXPECT_EQ(o.max_read, 512u << 10);
  EXPECT_EQ(o.config.zarr_chunk, 1ull << 20);
  EXPECT_EQ(o.config.unmount_retry, std::chrono::milliseconds(10000));
  EXPECT_FALSE(o.config.prefault);
  EXPECT_TRUE(o.direct_read);
  EXPECT_EQ(o.passthrough, Passthrough::kAuto);
}

TEST(MountOptionsTest, ZarrChunkZeroTurnsTheFineGridOff) {
  EXPECT_EQ(Parsed("zarr_chunk=0").config.zarr_chunk, 0u);
}

TEST(MountOptionsTest, FuseOptionsArePassedOnUnchanged) {
  MountOptions o = Parsed("allow_other,fsname=store,noatime");
  EXPECT_EQ(o.fuse_options, (std::vector<std::string>{"allow_other", "fsname=store", "noatime"}));
}

TEST(MountOptionsTest, MalformedOrUnknownOptionsAreRefusedNamingTheOption) {
  for (const char* bad :
       {"cache_size=banana", "cache_size=1M", "cache_size=", "cache_size", "nosuchopt",
        "flush_delay=soon", "fsync=maybe", "queue_depth=0", "queue_depth=5000", "flush_io=fast",
        "log_level=loud", "max_read=2M", "max_read=1", "direct_read=yes", "passthrough=maybe",
        "prefault=yes", "zarr_chunk=8M", "zarr_chunk=1K", "allow_other=1", "fsname"}) {
    Status st = Refused(bad);
    EXPECT_EQ(st.err(), EINVAL) << bad;
    std::string key = std::string(bad).substr(0, std::string(bad).find('='));
    EXPECT_NE(st.message().find(key), std::string::npos) << st.message();
  }
}

TEST(MountOptionsTest, ARefusalSaysWhichValuesAreAccepted) {
  EXPECT_NE(Refused("fsync=maybe").message().find("defer|wait"), std::string::npos);
}

TEST(MountOptionsTest, HelpListsEveryOptionWithItsDefault) {
  std::string help = MountOptionsHelp();
  for (const MountOption& o : MountOptionTable()) {
    EXPECT_NE(help.find(std::string(o.name) + "=" + o.values), std::string::npos) << o.name;
  }
  EXPECT_NE(help.find("fsync=defer|wait  (default defer)"), std::string::npos) << help;
}

TEST(MountOptionsTest, TheReadmeShowsTheOptionTable) {
  std::ifstream f(std::string(CKPTFS_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(f) << "README.md not found";
  std::stringstream readme;
  readme << f.rdbuf();
  EXPECT_NE(readme.str().find(MountOptionsMarkdown()), std::string::npos)
      << "README.md's option table differs from fs/options.cc; it should read:\n"
      << MountOptionsMarkdown();
}

}  // namespace
}  // namespace ckptfs
