// Mount option parsing (fs/options.cc), without a mount.
#include "fs/options.h"

#include <gtest/gtest.h>

#include <algorithm>
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
      "cache_size=8G,prefault=off,flush_delay=2s,fsync=wait,queue_depth=128,flush_io=direct,"
      "verify=markers,passthrough=off,max_read=128K,direct_read=off,zarr_chunk=2M,log_level=debug,"
      "log_file=/tmp/ckptfs.log,unmount_timeout=500ms,shared,node=gpu-7.cluster,"
      "commit_markers=.metadata:done.txt,member_timeout=3s,poll_interval=50ms");
  EXPECT_EQ(o.config.cache_size, 8ull << 30);
  EXPECT_FALSE(o.config.prefault);
  EXPECT_EQ(o.config.flush_delay, std::chrono::milliseconds(2000));
  EXPECT_EQ(o.config.fsync_mode, FsyncMode::kWait);
  EXPECT_EQ(o.config.queue_depth, 128u);
  EXPECT_EQ(o.config.flush_io, FlushIo::kDirect);
  EXPECT_EQ(o.config.verify, VerifyMode::kMarkers);
  ASSERT_TRUE(ApplyMountOptions("verify=reads", &o).ok());
  EXPECT_TRUE(VerifiesReads(o.config.verify) && !VerifiesMarkers(o.config.verify));
  ASSERT_TRUE(ApplyMountOptions("verify=all", &o).ok());
  EXPECT_TRUE(VerifiesReads(o.config.verify) && VerifiesMarkers(o.config.verify));
  EXPECT_EQ(o.passthrough, Passthrough::kOff);
  EXPECT_EQ(o.max_read, 128u << 10);
  EXPECT_FALSE(o.direct_read);
  EXPECT_EQ(o.config.zarr_chunk, 2ull << 20);
  EXPECT_EQ(o.log_level, "debug");
  EXPECT_EQ(o.log_file, "/tmp/ckptfs.log");
  EXPECT_EQ(o.config.unmount_retry, std::chrono::milliseconds(500));
  EXPECT_TRUE(o.config.shared);
  EXPECT_EQ(o.config.node, "gpu-7.cluster");
  EXPECT_EQ(o.config.commit_markers, (std::vector<std::string>{".metadata", "done.txt"}));
  EXPECT_EQ(o.config.member_timeout, std::chrono::milliseconds(3000));
  EXPECT_EQ(o.config.poll_interval, std::chrono::milliseconds(50));
}

TEST(MountOptionsTest, DefaultsAreWhatTheTableSays) {
  MountOptions o;
  EXPECT_EQ(o.config.fsync_mode, FsyncMode::kDefer);
  EXPECT_EQ(o.config.flush_delay, std::chrono::milliseconds(300));
  EXPECT_EQ(o.config.queue_depth, 64u);
  EXPECT_EQ(o.max_read, 512u << 10);
  EXPECT_EQ(o.config.zarr_chunk, 1ull << 20);
  EXPECT_EQ(o.config.unmount_retry, std::chrono::milliseconds(10000));
  EXPECT_TRUE(o.config.prefault);
  EXPECT_TRUE(o.direct_read);
  EXPECT_EQ(o.passthrough, Passthrough::kAuto);
  EXPECT_FALSE(o.config.shared);
  EXPECT_EQ(o.config.node, "") << "empty: the host name";
  EXPECT_EQ(o.config.member_timeout, std::chrono::milliseconds(10000));
  EXPECT_EQ(o.config.poll_interval, std::chrono::milliseconds(100));
  EXPECT_EQ(o.config.commit_markers,
            (std::vector<std::string>{".metadata", "metadata.json",
                                      "latest_checkpointed_iteration.txt", "latest_iteration.txt",
                                      "dlrover_latest.txt"}));
  std::string listed;
  for (const std::string& m : o.config.commit_markers) listed += (listed.empty() ? "" : ":") + m;
  const auto& table = MountOptionTable();
  auto row = std::find_if(table.begin(), table.end(), [](const MountOption& opt) {
    return std::string(opt.name) == "commit_markers";
  });
  ASSERT_NE(row, table.end());
  EXPECT_EQ(row->default_text, listed);
}

TEST(MountOptionsTest, SharedIsAFlagWithoutValue) {
  EXPECT_TRUE(Parsed("shared").config.shared);
  Status st = Refused("shared=on");
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_NE(st.message().find("takes no value"), std::string::npos) << st.message();
  EXPECT_NE(MountOptionsHelp().find("  shared\n"), std::string::npos) << MountOptionsHelp();
}

TEST(MountOptionsTest, ReplicationOptionsAreParsedAndBounded) {
  MountOptions o = Parsed(
      "shared,replicas=2,replication_secret=/etc/ck.key,replication_address=10.251.0.1,"
      "replica_memory=1G");
  EXPECT_EQ(o.config.replicas, 2);
  EXPECT_EQ(o.config.replication_secret, "/etc/ck.key");
  EXPECT_EQ(o.config.replication_address, "10.251.0.1");
  EXPECT_EQ(o.config.replica_memory, 1ull << 30);
  EXPECT_TRUE(CheckOptionsTogether(o.config).ok());
  EXPECT_EQ(Parsed("replication_address=fd00::1").config.replication_address, "fd00::1");
  MountOptions defaults;
  EXPECT_EQ(defaults.config.replicas, 0);
  EXPECT_EQ(defaults.config.replication_secret, "/etc/ckptfs/replication.key");
  EXPECT_TRUE(CheckOptionsTogether(defaults.config).ok());
  for (const char* bad : {"replicas=3", "replicas=-1", "replicas=01", "replicas=one",
                          "replication_address=node0", "replication_address=10.251.0.1:80",
                          "replica_memory=1M"}) {
    Status st = Refused(bad);
    EXPECT_EQ(st.err(), EINVAL) << bad;
  }
  EXPECT_NE(Refused("replicas=3").message().find("must be 0, 1 or 2"), std::string::npos);
}

TEST(MountOptionsTest, ReplicasWithoutSharedAreRefusedWithTheReason) {
  MountOptions o = Parsed("replicas=1");
  Status st = CheckOptionsTogether(o.config);
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_NE(st.message().find("replicas=1 needs -o shared"), std::string::npos) << st.message();
  EXPECT_TRUE(CheckOptionsTogether(Parsed("replicas=0").config).ok());
}

TEST(MountOptionsTest, ReplicasWithARemoteAreRefusedWithTheReason) {
  Status st = CheckOptionsTogether(Parsed("shared,replicas=1,remote=s3://bucket/run").config);
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_NE(st.message().find("replicas=1 with -o remote is not supported"), std::string::npos)
      << st.message();
}

TEST(MountOptionsTest, FsyncReplicatedNeedsReplicasAndSaysSo) {
  MountOptions o = Parsed("shared,replicas=1,fsync=replicated");
  EXPECT_EQ(o.config.fsync_mode, FsyncMode::kReplicated);
  EXPECT_TRUE(CheckOptionsTogether(o.config).ok());
  Status st = CheckOptionsTogether(Parsed("shared,fsync=replicated").config);
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_NE(st.message().find("fsync=replicated needs -o replicas=1 or 2"), std::string::npos)
      << st.message();
  EXPECT_NE(Refused("fsync=replicate").message().find("defer, wait, replicated"),
            std::string::npos);
}

TEST(MountOptionsTest, LocalSizeWithoutARemoteIsRefusedWithTheReason) {
  Status st = CheckOptionsTogether(Parsed("local_size=10G").config);
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_NE(st.message().find("local_size needs -o remote"), std::string::npos) << st.message();
  MountOptions o = Parsed("remote=s3://bucket/run,local_size=10G");
  EXPECT_EQ(o.config.local_size, 10ull << 30);
  EXPECT_TRUE(CheckOptionsTogether(o.config).ok());
  EXPECT_EQ(MountOptions().config.local_size, 0u);
  EXPECT_EQ(Refused("local_size=0").err(), EINVAL);
}

TEST(MountOptionsTest, NodeNamesAndMarkerNamesThatCouldEscapeTheirDirectoryAreRefused) {
  for (const char* bad : {"node=../x", "node=a/b", "node=..", "node=.hidden", "node=a b",
                          "commit_markers=../latest", "commit_markers=a/b", "commit_markers=..",
                          "commit_markers=a::b", "commit_markers=."}) {
    Status st = Refused(bad);
    EXPECT_EQ(st.err(), EINVAL) << bad;
  }
  EXPECT_EQ(Parsed("node=" + std::string(64, 'n')).config.node, std::string(64, 'n'));
  EXPECT_EQ(Refused("node=" + std::string(65, 'n')).err(), EINVAL);
}

TEST(MountOptionsTest, ZarrChunkZeroTurnsTheFineGridOff) {
  EXPECT_EQ(Parsed("zarr_chunk=0").config.zarr_chunk, 0u);
}

TEST(MountOptionsTest, FuseOptionsArePassedOnUnchanged) {
  MountOptions o = Parsed("allow_other,fsname=store,noatime");
  EXPECT_EQ(o.fuse_options, (std::vector<std::string>{"allow_other", "fsname=store", "noatime"}));
}

TEST(MountOptionsTest, TheGenericOptionsOfMountAndFstabAreAcceptedNeverAFailure) {
  MountOptions o = Parsed("rw,dev,suid,exec,async,nofail,_netdev,defaults,auto,noauto,user,"
                          "x-systemd.automount,x-systemd.mount-timeout=30,X-mount.mkdir,"
                          "comment=ckptfs");
  EXPECT_EQ(o.fuse_options,
            (std::vector<std::string>{"rw", "dev", "suid", "exec", "async"}));
  EXPECT_EQ(o.ignored_options.size(), 10u);
}

TEST(MountOptionsTest, TheMetricsEndpointIsLoopbackUnlessAHostIsGiven) {
  MountOptions o = Parsed("metrics=9400");
  EXPECT_EQ(o.metrics_host, "127.0.0.1");
  EXPECT_EQ(o.metrics_port, 9400);
  o = Parsed("metrics=0.0.0.0:9401,metrics_file=/var/lib/node_exporter/ckptfs.prom");
  EXPECT_EQ(o.metrics_host, "0.0.0.0");
  EXPECT_EQ(o.metrics_port, 9401);
  EXPECT_EQ(o.metrics_file, "/var/lib/node_exporter/ckptfs.prom");
  EXPECT_EQ(Parsed("metrics=[::1]:9402").metrics_host, "::1");
  for (const char* bad : {"metrics=0", "metrics=65536", "metrics=port", "metrics=:9400",
                          "metrics=a b:9400", "metrics=[]:9400", "metrics=9400x",
                          "metrics_file=relative.prom", "metrics_interval=10ms"}) {
    EXPECT_EQ(Refused(bad).err(), EINVAL) << bad;
  }
}

TEST(MountOptionsTest, MalformedOrUnknownOptionsAreRefusedNamingTheOption) {
  for (const char* bad :
       {"cache_size=banana", "cache_size=1M", "cache_size=", "cache_size", "nosuchopt",
        "flush_delay=soon", "fsync=maybe", "queue_depth=0", "queue_depth=5000", "flush_io=fast", "verify=maybe",
        "log_level=loud", "max_read=2M", "max_read=1", "direct_read=yes", "passthrough=maybe",
        "prefault=yes", "zarr_chunk=8M", "zarr_chunk=1K", "allow_other=1", "fsname",
        "node=", "member_timeout=500ms", "member_timeout=1h", "poll_interval=5ms",
        "poll_interval=20s", "poll_interval=soon", "commit_markers="}) {
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
    std::string form = *o.values ? std::string(o.name) + "=" + o.values : std::string(o.name);
    EXPECT_NE(help.find("  " + form), std::string::npos) << o.name;
  }
  EXPECT_NE(help.find("fsync=defer|wait|replicated  (default defer)"), std::string::npos) << help;
}

TEST(MountOptionsTest, TheManPageShowsEveryOptionWithItsValues) {
  std::ifstream page(std::string(CKPTFS_SOURCE_DIR) + "/fs/deploy/ckptfs.8");
  std::stringstream text;
  text << page.rdbuf();
  for (const MountOption& o : MountOptionTable()) {
    std::string form = *o.values ? std::string(o.name) + "=" + o.values : std::string(o.name);
    EXPECT_NE(text.str().find(".TP\n\\fB" + form + "\\fR\n"), std::string::npos) << form;
  }
}

TEST(MountOptionsTest, RequestPollingIs400MicrosecondsUnlessAskedOtherwiseUpTo2000) {
  MountOptions o;
  EXPECT_EQ(o.request_poll, std::chrono::microseconds(400));
  ASSERT_TRUE(ApplyMountOptions("request_poll=100", &o).ok());
  EXPECT_EQ(o.request_poll, std::chrono::microseconds(100));
  ASSERT_TRUE(ApplyMountOptions("request_poll=2000us", &o).ok());
  EXPECT_EQ(o.request_poll, std::chrono::microseconds(2000));
  ASSERT_TRUE(ApplyMountOptions("request_poll=1ms", &o).ok());
  EXPECT_EQ(o.request_poll, std::chrono::microseconds(1000));
  ASSERT_TRUE(ApplyMountOptions("request_poll=0", &o).ok());
  EXPECT_EQ(o.request_poll, std::chrono::microseconds(0));
  for (const char* bad : {"request_poll=2001", "request_poll=-1", "request_poll=3ms",
                          "request_poll=1s", "request_poll=", "request_poll=us",
                          "request_poll=99999999999"}) {
    EXPECT_EQ(ApplyMountOptions(bad, &o).err(), EINVAL) << bad;
  }
  EXPECT_EQ(o.request_poll, std::chrono::microseconds(0));
}

TEST(MountOptionsTest, DurationsInMillisecondsTakeAnyUnitThatGivesWholeMilliseconds) {
  MountOptions o;
  ASSERT_TRUE(ApplyMountOptions("flush_delay=250", &o).ok());
  EXPECT_EQ(o.config.flush_delay, std::chrono::milliseconds(250));
  ASSERT_TRUE(ApplyMountOptions("flush_delay=2s", &o).ok());
  EXPECT_EQ(o.config.flush_delay, std::chrono::milliseconds(2000));
  ASSERT_TRUE(ApplyMountOptions("flush_delay=3000us", &o).ok());
  EXPECT_EQ(o.config.flush_delay, std::chrono::milliseconds(3));
  for (const char* bad : {"flush_delay=1500us", "flush_delay=2m", "flush_delay=1.5s"}) {
    EXPECT_EQ(ApplyMountOptions(bad, &o).err(), EINVAL) << bad;
  }
  EXPECT_EQ(o.config.flush_delay, std::chrono::milliseconds(3));
}

TEST(MountOptionsTest, TheCacheIsInSharedMemoryWithHugePagesUnlessAskedOtherwise) {
  MountOptions o;
  EXPECT_EQ(o.cache_memory, CacheMemory::kShared);
  EXPECT_TRUE(o.set_huge_pages);
  ASSERT_TRUE(ApplyMountOptions("cache_memory=private,huge_pages=leave", &o).ok());
  EXPECT_EQ(o.cache_memory, CacheMemory::kPrivate);
  EXPECT_FALSE(o.set_huge_pages);
  ASSERT_TRUE(ApplyMountOptions("cache_memory=shared,huge_pages=set", &o).ok());
  EXPECT_EQ(o.cache_memory, CacheMemory::kShared);
  EXPECT_TRUE(o.set_huge_pages);
  EXPECT_EQ(ApplyMountOptions("cache_memory=auto", &o).err(), EINVAL);
  EXPECT_EQ(ApplyMountOptions("huge_pages=on", &o).err(), EINVAL);
}

TEST(MountOptionsTest, ACacheLargerThanPhysicalMemoryIsRefusedNamingBothSizes) {
  const uint64_t memory = 24ull << 30;
  EXPECT_TRUE(CheckCacheSize(memory / 4, {.physical = memory}).ok());
  EXPECT_TRUE(CheckCacheSize(memory, {.physical = memory}).ok());
  Status st = CheckCacheSize(100ull << 40, {.physical = memory});
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_NE(st.message().find("cache_size"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("100.0 TiB"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("24.0 GiB"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("physical memory"), std::string::npos) << st.message();
  EXPECT_EQ(CheckCacheSize(memory + 1, {.physical = memory}).err(), EINVAL);
  EXPECT_TRUE(CheckCacheSize(DefaultCacheSize(), ReadMemoryBounds()).ok());
  EXPECT_GT(PhysicalMemory(), 0u);
}

TEST(MountOptionsTest, ACacheLargerThanItsCgroupsMemoryLimitIsRefusedThoughTheMachineHasMore) {
  const MemoryBounds container{.physical = 64ull << 30, .cgroup = 8ull << 30};
  EXPECT_EQ(UsableMemory(container), 8ull << 30);
  EXPECT_TRUE(CheckCacheSize(8ull << 30, container).ok());
  Status st = CheckCacheSize(16ull << 30, container);
  EXPECT_EQ(st.err(), EINVAL);
  EXPECT_NE(st.message().find("cgroup"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("8.0 GiB"), std::string::npos) << st.message();
  // A limit above the machine's memory, or none: the machine's memory bounds it.
  EXPECT_EQ(UsableMemory({.physical = 64ull << 30, .cgroup = 1ull << 40}), 64ull << 30);
  EXPECT_NE(CheckCacheSize(100ull << 30, {.physical = 64ull << 30, .cgroup = 1ull << 40})
                .message()
                .find("physical memory"),
            std::string::npos);
  EXPECT_EQ(UsableMemory({.physical = 0, .cgroup = 8ull << 30}), 8ull << 30);
  EXPECT_EQ(UsableMemory({}), 0u);
  EXPECT_TRUE(CheckCacheSize(1ull << 50, {}).ok()) << "nothing known: nothing refused";
}

TEST(MountOptionsTest, TheCgroupPathAndMemoryMaxAreReadFromTheirTexts) {
  EXPECT_EQ(CgroupV2Path("0::/system.slice/ckptfs@mnt-ckpt.service\n"),
            "/system.slice/ckptfs@mnt-ckpt.service");
  EXPECT_EQ(CgroupV2Path("12:memory:/docker/abc\n0::/docker/abc\n"), "/docker/abc");
  EXPECT_EQ(CgroupV2Path("4:memory:/process_api/a3\n1:cpu:/\n"), "") << "cgroup v1 only";
  EXPECT_EQ(CgroupV2Path("0::/\n"), "/");
  EXPECT_EQ(ParseMemoryMax("8589934592\n"), 8ull << 30);
  EXPECT_EQ(ParseMemoryMax("max\n"), 0u);
  EXPECT_EQ(ParseMemoryMax(""), 0u);
  EXPECT_EQ(ParseMemoryMax("12ab"), 0u);
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
