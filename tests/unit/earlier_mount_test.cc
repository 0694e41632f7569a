// Tests of RecoverEarlierMount (core/filesystem/earlier_mount.h): a mount whose daemon died leaves
// its cache memory; the next mount of the same backing store, whatever its cache size, publishes
// what was sealed, rescues what was open for writing, and a failed rescue leaves everything for a
// retry.
#include "core/filesystem/earlier_mount.h"

#include <gtest/gtest.h>
#include <sys/mman.h>

#include <string>

#include "core/memory/arena.h"
#include "core/recovery/cache_memory_layout.h"
#include "core_test_util.h"

namespace ckptfs {
namespace {

using namespace std::chrono_literals;
using namespace testing_util;

// The directories under `dir` whose names start with `prefix`.
std::vector<std::string> Named(const std::string& dir, const std::string& prefix) {
  std::vector<std::string> found;
  for (const std::string& name : HostList(dir)) {
    if (name.rfind(prefix, 0) == 0) found.push_back(name);
  }
  return found;
}

class EarlierMountTest : public ::testing::Test {
 protected:
  std::string B(const std::string& rel) const { return backing_ / rel; }

  // Recovers with a cache of `cache_size` (not the earlier mount's), through `env` if given.
  Status RecoverWith(uint64_t cache_size, std::unique_ptr<Env> env = nullptr) {
    Config config;
    config.backing_dir = backing_.path();
    config.cache_size = cache_size;
    config.queue_depth = 16;
    if (!env) env = MakeTestEnv(config.queue_depth);
    return RecoverEarlierMount(config, memory_.fd(), std::move(env));
  }

  // A mount that dies with: a sealed model renamed into place, a tracker naming it, and a shard
  // written and never closed.
  void DieWithSealedAndOpenFiles() {
    auto died = StartFs(backing_.path(), {.flush_delay = 3600s, .arena_fd = memory_.fd()});
    ASSERT_TRUE(died->Mkdir(kRootIno, "iter_1", 0755, Me()).ok());
    ASSERT_TRUE(WriteFile(*died, "iter_1/model.pt.tmp", model_).ok());
    const uint64_t dir = Resolve(*died, "iter_1")->ino;
    ASSERT_TRUE(died->Rename(dir, "model.pt.tmp", dir, "model.pt", 0).ok());
    ASSERT_TRUE(WriteFile(*died, "latest", "1").ok());
    Result<uint64_t> shard = CreatePath(*died, "iter_1/__0_0.distcp");
    ASSERT_TRUE(shard.ok());
    ASSERT_TRUE(WriteHandle(*died, *shard, 0, shard_).ok());
    EXPECT_FALSE(HostExists(B("latest"))) << "nothing flushed before the death";
  }

  TempDir backing_;
  ArenaMemory memory_{64ull << 20};
  const std::string model_ = Pattern(1, 5 * kBlockSize + 17);
  const std::string shard_ = Pattern(2, 3 * kBlockSize + 5);
};

TEST_F(EarlierMountTest, SealedVersionsArePublishedAndOpenFilesRescuedWhateverTheNewCacheSize) {
  DieWithSealedAndOpenFiles();
  ASSERT_TRUE(RecoverWith(16ull << 20).ok());
  EXPECT_TRUE(SameBytes(*ReadHostFile(B("iter_1/model.pt")), model_));
  EXPECT_EQ(*ReadHostFile(B("latest")), "1");
  EXPECT_FALSE(HostExists(B("iter_1/model.pt.tmp")));
  EXPECT_FALSE(HostExists(B("iter_1/__0_0.distcp"))) << "never closed: not published";
  std::vector<std::string> rescues = Named(B(".ckptfs"), "rescue-");
  ASSERT_EQ(rescues.size(), 1u);
  EXPECT_TRUE(SameBytes(*ReadHostFile(B(".ckptfs/" + rescues[0] + "/iter_1/__0_0.distcp")), shard_));

  // Recovered once: a second try finds nothing more to do.
  ASSERT_TRUE(RecoverWith(16ull << 20).ok());
  EXPECT_EQ(Named(B(".ckptfs"), "rescue-").size(), 1u);
  EXPECT_TRUE(SameBytes(*ReadHostFile(B("iter_1/model.pt")), model_));
}

TEST_F(EarlierMountTest, AFailedRescueLeavesEverythingForTheNextTry) {
  DieWithSealedAndOpenFiles();
  auto fault = std::make_unique<FaultInjectingEnv>(MakeTestEnv());
  // The shard cannot be written to either rescue directory.
  fault->Inject(FaultInjectingEnv::Fault(FaultInjectingEnv::Op::kOpen, EIO).Named("__0_0.distcp"));
  Status failed = RecoverWith(64ull << 20, std::move(fault));
  EXPECT_FALSE(failed.ok());
  EXPECT_FALSE(HostExists(B("latest"))) << "nothing replayed before the open files are safe";
  for (const std::string& left : Named("/var/tmp", "ckptfs-rescue-")) {
    if (left.find("-" + std::to_string(getpid())) != std::string::npos) {
      std::filesystem::remove_all("/var/tmp/" + left);
    }
  }
  ASSERT_TRUE(RecoverWith(64ull << 20).ok());
  EXPECT_TRUE(SameBytes(*ReadHostFile(B("iter_1/model.pt")), model_));
  EXPECT_EQ(*ReadHostFile(B("latest")), "1");
  bool rescued = false;
  for (const std::string& r : Named(B(".ckptfs"), "rescue-")) {
    std::optional<std::string> bytes = ReadHostFile(B(".ckptfs/" + r + "/iter_1/__0_0.distcp"));
    rescued = rescued || (bytes && *bytes == shard_);
  }
  EXPECT_TRUE(rescued);
}

TEST_F(EarlierMountTest, InSharedModeARecoveredMarkerIsNeverPublishedOverAMarkerOfItsName) {
  const std::string tracker = "latest_checkpointed_iteration.txt";
  {
    // Node n0 dies with a checkpoint and its tracker sealed, before its commit.
    auto died = StartFs(backing_.path(),
                        {.flush_delay = 3600s, .node = "n0", .arena_fd = memory_.fd()});
    ASSERT_TRUE(died->Mkdir(kRootIno, "iter_1", 0755, Me()).ok());
    ASSERT_TRUE(WriteFile(*died, "iter_1/model.pt", model_).ok());
    ASSERT_TRUE(WriteFile(*died, "iter_1/.metadata", "meta").ok());
    ASSERT_TRUE(WriteFile(*died, tracker, "1").ok());
  }
  // The job went on without it: node n1 committed a newer tracker.
  auto n1 = StartFs(backing_.path(), {.node = "n1"});
  ASSERT_TRUE(WriteFile(*n1, tracker, "2").ok());
  ASSERT_TRUE(n1->Sync().ok());
  ASSERT_TRUE(n1->Shutdown().ok());
  ASSERT_EQ(*ReadHostFile(B(tracker)), "2");

  Config config;
  config.backing_dir = backing_.path();
  config.cache_size = 64ull << 20;
  config.queue_depth = 16;
  config.shared = true;
  config.node = "n0";
  config.member_timeout = 1000ms;
  config.poll_interval = 10ms;
  ASSERT_TRUE(RecoverEarlierMount(config, memory_.fd(), MakeTestEnv(config.queue_depth)).ok());
  EXPECT_TRUE(SameBytes(*ReadHostFile(B("iter_1/model.pt")), model_));
  EXPECT_EQ(ReadHostFile(B("iter_1/.metadata")), "meta") << "a marker with its name free commits";
  EXPECT_EQ(*ReadHostFile(B(tracker)), "2") << "the dead node's older tracker replaced the newer";
}

TEST(EarlierMountSpillTest, AFileSpilledToTheStagingDirectoryIsRescuedAndItsSpillFileRemoved) {
  TempDir backing;
  constexpr uint64_t kCache = 1 << 20;
  ArenaMemory memory(kCache);
  const std::string big = Pattern(3, 3 * kCache + 1000);
  const uint64_t handle =
      WriteASpilledFileAndDie(backing.path(), kCache, memory.fd(), "big.distcp", big);
  ASSERT_NE(handle, 0u);
  ASSERT_EQ(HostTree(backing / ".ckptfs/staging").size(), 1u) << "its spill file, kept";
  Config config;
  config.backing_dir = backing.path();
  config.cache_size = 32ull << 20;
  config.queue_depth = 16;
  ASSERT_TRUE(RecoverEarlierMount(config, memory.fd(), MakeTestEnv()).ok());
  std::vector<std::string> rescues = Named(backing / ".ckptfs", "rescue-");
  ASSERT_EQ(rescues.size(), 1u);
  EXPECT_TRUE(SameBytes(*ReadHostFile(backing / (".ckptfs/" + rescues[0] + "/big.distcp")), big));
  EXPECT_TRUE(HostTree(backing / ".ckptfs/staging").empty()) << "the spill file went";
  EXPECT_FALSE(HostExists(backing / "big.distcp"));
}

TEST(EarlierMountMemoryTest, MemoryThatIsNoCacheOfAnySizeIsRefused) {
  TempDir backing;
  int fd = memfd_create("not-a-cache", MFD_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, ArenaMemoryBytes(16ull << 20) + 1), 0);
  Config config;
  config.backing_dir = backing.path();
  config.cache_size = 16ull << 20;
  Status st = RecoverEarlierMount(config, fd, MakeTestEnv());
  EXPECT_EQ(st.err(), EINVAL) << st.ToString();
  close(fd);
}

}  // namespace
}  // namespace ckptfs
