// fsync=replicated end to end without FUSE: two Filesystems over one backing directory stand for
// two nodes (-o shared,replicas=1, partners over real TCP on the loopback interface), neither
// flushing by age. An fsync returns once the file and everything sealed before it are in the
// partner's memory: not while the partner is away (nothing then makes the file durable either),
// and once the partner is there and holds the bytes, with nothing on the backing store yet. And a
// committer killed (in a child process, SIGKILL) after its fsyncs returned and before anything
// was durable: its partner publishes its data, then its marker.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core_test_util.h"
#include "eventually.h"

namespace ckptfs {
namespace {

using namespace ckptfs::testing_util;
using namespace std::chrono_literals;

// Long enough that nothing is flushed by age.
constexpr std::chrono::milliseconds kNeverByAge = std::chrono::hours(1);
// How long a test watches for something that must not happen: many feed ticks and polls.
constexpr std::chrono::milliseconds kWatch = 500ms;

class ReplicatedFsyncTest : public ::testing::Test {
 protected:
  void SetUp() override {
    WriteHostFile(secret_, "the secret of the replicated fsync test's group");
    ASSERT_EQ(chmod(secret_.c_str(), 0600), 0);
  }
  void TearDown() override { unlink(secret_.c_str()); }

  std::unique_ptr<Filesystem> Node(const std::string& name) {
    FsOptions o;
    o.node = name;
    o.flush_delay = kNeverByAge;
    o.fsync_mode = FsyncMode::kReplicated;
    o.replicas = 1;
    o.replication_secret = secret_;
    o.replication_address = "127.0.0.1";
    return StartFs(backing_.path(), o);
  }

  TempDir backing_;
  const std::string secret_ = backing_.path() + ".key";
};

TEST_F(ReplicatedFsyncTest, AnFsyncReturnsOnlyOnceThePartnerHoldsTheFileAndWhatCameBefore) {
  auto a = Node("a");
  ASSERT_TRUE(a);
  const std::string before = Pattern(1, 3 << 20);
  const std::string data = Pattern(2, 5 << 20);
  ASSERT_TRUE(a->Mkdir(kRootIno, "ckpt", 0755, Me()).ok());
  ASSERT_TRUE(WriteFile(*a, "/ckpt/__0_0.before", before).ok());
  Result<uint64_t> h = CreatePath(*a, "/ckpt/__0_0.distcp");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  ASSERT_TRUE(WriteHandle(*a, *h, 0, data).ok());
  auto synced = std::async(std::launch::async, [&] { return a->Fsync(*h); });

  // No partner yet: nothing holds the file, and nothing makes it durable.
  EXPECT_EQ(synced.wait_for(kWatch), std::future_status::timeout)
      << "fsync returned with no partner holding the file";

  auto b = Node("b");
  ASSERT_TRUE(b);
  ASSERT_EQ(synced.wait_for(20s), std::future_status::ready) << "fsync never returned";
  Status st = synced.get();
  EXPECT_TRUE(st.ok()) << st.ToString();
  // The partner holds both files (the earlier one, sealed before, too); the backing store has
  // neither yet.
  const nlohmann::json held = StatsOf(*b)["replication"];
  EXPECT_EQ(held["held_replicas"], 2) << held.dump();
  EXPECT_EQ(held["held_bytes"], before.size() + data.size()) << held.dump();
  EXPECT_FALSE(HostExists(backing_ / "ckpt/__0_0.distcp"));
  EXPECT_FALSE(HostExists(backing_ / "ckpt/__0_0.before"));
  const nlohmann::json own = StatsOf(*a)["replication"];
  EXPECT_GE(own["replicated_seq"], own["sealed_seq"]) << own.dump();

  ASSERT_TRUE(Close(*a, *h).ok());
  ASSERT_TRUE(a->Shutdown().ok());
  ASSERT_TRUE(b->Shutdown().ok());
  EXPECT_TRUE(SameBytes(*ReadHostFile(backing_ / "ckpt/__0_0.distcp"), data));
  EXPECT_TRUE(SameBytes(*ReadHostFile(backing_ / "ckpt/__0_0.before"), before));
}

TEST_F(ReplicatedFsyncTest, ADeadCommittersCheckpointIsPublishedByItsPartnerDataFirst) {
  const std::string shard = Pattern(3, 2 << 20);
  const std::string tracker = "100";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The committer: never destroyed, killed once its save returned.
    close(ready[0]);
    Filesystem* a = Node("a").release();
    char saved = a != nullptr;
    for (const auto& [path, bytes] : {std::pair<std::string, std::string>{"/ckpt", ""},
                                      {"/ckpt/__0_0.distcp", shard},
                                      {"/latest_checkpointed_iteration.txt", tracker}}) {
      if (!saved) break;
      if (bytes.empty()) {
        saved = a->Mkdir(kRootIno, "ckpt", 0755, Me()).ok();
        continue;
      }
      Result<uint64_t> h = CreatePath(*a, path);
      saved = h.ok() && WriteHandle(*a, *h, 0, bytes).ok() && a->Fsync(*h).ok() &&
              Close(*a, *h).ok();
    }
    if (write(ready[1], &saved, 1) != 1) _exit(1);
    pause();
    _exit(0);
  }
  close(ready[1]);
  auto b = Node("b");
  ASSERT_TRUE(b);
  char saved = 0;
  const bool told = read(ready[0], &saved, 1) == 1;
  close(ready[0]);
  // What a told b it covers follows the replicas it stored; give it a poll interval or two.
  std::this_thread::sleep_for(200ms);
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(told && saved) << "the committer's save failed";
  EXPECT_FALSE(HostExists(backing_ / "ckpt/__0_0.distcp")) << "durable before the death";
  EXPECT_FALSE(HostExists(backing_ / "latest_checkpointed_iteration.txt"));

  const std::string marker = backing_ / "latest_checkpointed_iteration.txt";
  Eventually([&] { return HostExists(marker); }, 30s);
  EXPECT_EQ(ReadHostFile(marker).value_or("<missing>"), tracker)
      << "the dead committer's marker, through its partner";
  EXPECT_TRUE(SameBytes(ReadHostFile(backing_ / "ckpt/__0_0.distcp").value_or(""), shard));
  // Counted once in place: after the marker's rename.
  EXPECT_TRUE(Eventually([&] { return StatsOf(*b)["replication"]["completed_for_dead"] == 2; }))
      << StatsOf(*b).dump();
  ASSERT_TRUE(b->Shutdown().ok());
}

}  // namespace
}  // namespace ckptfs
