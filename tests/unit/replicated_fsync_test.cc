// fsync=replicated end to end without FUSE: two Filesystems over one backing directory stand for
// two nodes (-o shared,replicas=1, partners over real TCP on the loopback interface), neither
// flushing by age. An fsync returns once the file and everything sealed before it are in the
// partner's memory: not while the partner is away (nothing then makes the file durable either),
// and once the partner is there and holds the bytes, with nothing on the backing store yet. And a
// committer killed (in a child process, SIGKILL) after its fsyncs returned and before anything
// was durable: its partner publishes its data, then its marker; also one published by a rename
// (DCP's .metadata.tmp to .metadata), whose old name the partner removes as the rename would.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
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

  // Runs `save` on a committer "a" in a child process, never destroyed, starts its partner "b"
  // here (`*partner`; after the fork, which a process running threads must not make), and kills
  // the committer (SIGKILL) once the save returned and its partner was told what it holds.
  // Whether `save` succeeded.
  bool KillCommitterAfter(const std::function<bool(Filesystem&)>& save,
                          std::unique_ptr<Filesystem>* partner) {
    int ready[2];
    if (pipe(ready) != 0) return false;
    const pid_t child = fork();
    if (child < 0) return false;
    if (child == 0) {
      close(ready[0]);
      Filesystem* a = Node("a").release();
      char saved = a != nullptr && save(*a);
      if (write(ready[1], &saved, 1) != 1) _exit(1);
      pause();
      _exit(0);
    }
    close(ready[1]);
    *partner = Node("b");
    char saved = 0;
    const bool told = read(ready[0], &saved, 1) == 1;
    close(ready[0]);
    // What a told its partner it covers follows the replicas it stored; give it a poll or two.
    std::this_thread::sleep_for(200ms);
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    return told && saved;
  }
  // Writes `bytes` to a new file at `path`, fsyncs and closes it.
  static bool SaveFile(Filesystem& fs, const std::string& path, const std::string& bytes,
                       uint32_t mode = 0644) {
    Result<uint64_t> h = CreatePath(fs, path, O_CREAT | O_RDWR | O_TRUNC, mode);
    return h.ok() && WriteHandle(fs, *h, 0, bytes).ok() && fs.Fsync(*h).ok() &&
           Close(fs, *h).ok();
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
  std::unique_ptr<Filesystem> b;
  const bool saved = KillCommitterAfter(
      [&](Filesystem& a) {
        return a.Mkdir(kRootIno, "ckpt", 0755, Me()).ok() &&
               SaveFile(a, "/ckpt/__0_0.distcp", shard) &&
               SaveFile(a, "/latest_checkpointed_iteration.txt", tracker);
      },
      &b);
  ASSERT_TRUE(b);
  ASSERT_TRUE(saved) << "the committer's save failed";
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

// DCP's FileSystemWriter: .metadata.tmp written, fsynced and closed, then renamed to .metadata;
// nothing durable when the committer dies, or its .metadata.tmp durable already.
TEST_F(ReplicatedFsyncTest, ADeadCommittersRenamedMarkerIsPublishedByItsPartnerWithoutItsOldName) {
  const std::string shard = Pattern(4, 2 << 20);
  const std::string metadata = Pattern(5, 3000);
  for (const bool source_durable : {false, true}) {
    SCOPED_TRACE(source_durable ? ".metadata.tmp durable before the rename" : "nothing durable");
    const std::string dir = source_durable ? "durable" : "memory";
    std::unique_ptr<Filesystem> b;
    const bool saved = KillCommitterAfter(
        [&](Filesystem& a) {
          if (!a.Mkdir(kRootIno, dir, 0755, Me()).ok() ||
              !SaveFile(a, "/" + dir + "/__0_0.distcp", shard) ||
              !SaveFile(a, "/" + dir + "/.metadata.tmp", metadata, 0640)) {
            return false;
          }
          if (source_durable && !a.Sync().ok()) return false;
          Result<Attr> in = Resolve(a, "/" + dir);
          return in.ok() && a.Rename(in->ino, ".metadata.tmp", in->ino, ".metadata", 0).ok();
        },
        &b);
    ASSERT_TRUE(b);
    ASSERT_TRUE(saved) << "the committer's save failed";
    EXPECT_EQ(HostExists(backing_ / (dir + "/.metadata.tmp")), source_durable);
    EXPECT_FALSE(HostExists(backing_ / (dir + "/.metadata")));

    const std::string marker = backing_ / (dir + "/.metadata");
    Eventually([&] { return HostExists(marker); }, 30s);
    EXPECT_TRUE(SameBytes(ReadHostFile(marker).value_or("<missing>"), metadata))
        << "the dead committer's renamed marker, through its partner";
    struct stat st {};
    ASSERT_EQ(stat(marker.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0640u) << "the renamed file's mode";
    // The old name goes right after the marker is in place.
    const std::string old_name = backing_ / (dir + "/.metadata.tmp");
    EXPECT_TRUE(Eventually([&] { return !HostExists(old_name); })) << "renamed away, as the rename";
    EXPECT_TRUE(SameBytes(ReadHostFile(backing_ / (dir + "/__0_0.distcp")).value_or(""), shard));
    // The shard and .metadata.tmp (unless durable already), then the marker.
    const int completed = source_durable ? 1 : 3;
    EXPECT_TRUE(Eventually([&] {
      return StatsOf(*b)["replication"]["completed_for_dead"] == completed;
    })) << StatsOf(*b).dump();
    ASSERT_TRUE(b->Shutdown().ok());
  }
}

}  // namespace
}  // namespace ckptfs
