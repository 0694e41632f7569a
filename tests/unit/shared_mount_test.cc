// Shared mode end to end without FUSE: several Filesystems over one backing directory stand for
// mounts on several nodes (real threads, real clock, short member_timeout). A commit marker
// reaches the backing store only after every other live member made durable what it had sealed
// before the marker (a member owing an acknowledgement flushes at once, whatever its
// flush_delay); a member that stops beating fails the commit; a slow one only delays it.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "core_test_util.h"
#include "eventually.h"

namespace ckptfs {
namespace {

using namespace ckptfs::testing_util;
using namespace std::chrono_literals;

// Long enough that nothing is flushed by age.
constexpr std::chrono::milliseconds kNeverByAge = std::chrono::hours(1);
// How long a test watches for something that must not happen: many polls and beats.
constexpr std::chrono::milliseconds kWatch = 300ms;
// A member's slow storage: each sync of its takes this long (long enough for the committer's own
// flush and a watch, on a loaded machine).
constexpr std::chrono::milliseconds kSlowSync = 3s;

class SharedMountTest : public ::testing::Test {
 protected:
  std::unique_ptr<Filesystem> Node(const std::string& name, std::chrono::milliseconds flush_delay,
                                   FaultInjectingEnv** fault = nullptr) {
    FsOptions o;
    o.node = name;
    o.flush_delay = flush_delay;
    o.fault = fault != nullptr;
    return StartFs(backing_.path(), o, fault);
  }
  bool OnBacking(const std::string& rel) const { return HostExists(backing_ / rel); }
  static nlohmann::json SharedStats(Filesystem& fs) { return nlohmann::json::parse(fs.StatsJson())["shared"]; }

  TempDir backing_;
};

template <typename T>
bool Ready(const std::future<T>& f) {
  return f.wait_for(0s) == std::future_status::ready;
}

TEST_F(SharedMountTest, AMarkerIsPublishedOnlyOnceEveryOtherMemberMadeItsEarlierDataDurable) {
  auto a = Node("a", 0ms);
  FaultInjectingEnv* b_env = nullptr;
  auto b = Node("b", kNeverByAge, &b_env);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(WriteFile(*b, "__1_0.distcp", Pattern(1, 100000)).ok());
  b_env->Inject(FaultInjectingEnv::Fault(Env::Op::kSync, 0).Delayed(kSlowSync));
  ASSERT_TRUE(WriteFile(*a, "__0_0.distcp", Pattern(0, 100000)).ok());
  ASSERT_TRUE(WriteFile(*a, ".metadata", "meta").ok());
  auto committed = std::async(std::launch::async, [&] { return a->Sync(); });

  EXPECT_TRUE(Eventually([&] { return OnBacking("__0_0.distcp"); }))
      << "the committer's own data flows as always";
  std::this_thread::sleep_for(kWatch);
  EXPECT_FALSE(OnBacking("__1_0.distcp"));
  EXPECT_FALSE(OnBacking(".metadata")) << "published before member b's data was durable";
  EXPECT_FALSE(Ready(committed)) << "sync returned before the marker's commit was decided";
  EXPECT_EQ(SharedStats(*a)["held_markers"], 1);

  // b flushes for the commit without waiting its flush_delay of an hour, or a sync.
  Status st = committed.get();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(ReadHostFile(backing_ / ".metadata"), "meta");
  EXPECT_TRUE(OnBacking("__1_0.distcp"));
  EXPECT_EQ(SharedStats(*a)["commits_published"], 1);
  EXPECT_TRUE(a->Shutdown().ok());
  EXPECT_TRUE(b->Shutdown().ok());
}

TEST_F(SharedMountTest, AMarkerRenamedIntoPlaceIsHeldLikeOneWrittenInPlace) {
  auto a = Node("a", 0ms);
  FaultInjectingEnv* b_env = nullptr;
  auto b = Node("b", kNeverByAge, &b_env);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(WriteFile(*b, "__1_0.distcp", Pattern(1, 4096)).ok());
  b_env->Inject(FaultInjectingEnv::Fault(Env::Op::kSync, 0).Delayed(kSlowSync));
  ASSERT_TRUE(WriteFile(*a, ".metadata.tmp", "meta").ok());
  auto r = ParentOf(*a, ".metadata.tmp");
  ASSERT_TRUE(r.ok());
  ASSERT_TRUE(a->Rename(r->first, ".metadata.tmp", r->first, ".metadata", 0).ok());
  auto committed = std::async(std::launch::async, [&] { return a->Sync(); });

  EXPECT_TRUE(Eventually([&] { return OnBacking(".metadata.tmp"); }));
  std::this_thread::sleep_for(kWatch);
  EXPECT_FALSE(OnBacking(".metadata"));
  Result<std::string> seen = ReadFile(*a, ".metadata");
  EXPECT_TRUE(seen.ok() && *seen == "meta") << "the committing mount shows its own rename";
  EXPECT_EQ(Resolve(*a, ".metadata.tmp").status().err(), ENOENT)
      << "the renamed name came back from the backing store while the rename was held";

  EXPECT_TRUE(committed.get().ok());
  EXPECT_EQ(ReadHostFile(backing_ / ".metadata"), "meta");
  EXPECT_FALSE(OnBacking(".metadata.tmp"));
  EXPECT_TRUE(a->Shutdown().ok());
  EXPECT_TRUE(b->Shutdown().ok());
}

TEST_F(SharedMountTest, AMemberThatStopsBeatingFailsTheCommitAndTheMarkerIsNeverPublished) {
  auto a = Node("a", 0ms);
  FaultInjectingEnv* b_env = nullptr;
  auto b = Node("b", kNeverByAge, &b_env);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(WriteFile(*b, "__1_0.distcp", Pattern(1, 4096)).ok());
  // Every rename of b fails from now on: its heartbeat (its member file renamed into place), its
  // acknowledgement and the publication of its data. a judges it dead, and awaits it
  // member_timeout more in case it was only stalled.
  b_env->Inject(FaultInjectingEnv::Fault(Env::Op::kRename, EIO));
  ASSERT_TRUE(WriteFile(*a, "latest_checkpointed_iteration.txt", "100").ok());

  Status st = a->Sync();
  EXPECT_EQ(st.err(), EHOSTDOWN) << st.ToString();
  EXPECT_NE(st.message().find("b"), std::string::npos) << st.ToString();
  EXPECT_FALSE(OnBacking("latest_checkpointed_iteration.txt"));
  nlohmann::json shared = SharedStats(*a);
  EXPECT_EQ(shared["commits_failed"], 1);
  EXPECT_NE(shared["last_commit_error"], "");
  EXPECT_TRUE(WriteFile(*a, "latest_checkpointed_iteration.txt", "101").ok())
      << "the failed commit was returned again by the marker's next close";

  b_env->Heal();
  EXPECT_TRUE(b->Shutdown().ok());
  EXPECT_TRUE(a->Shutdown().ok());
  EXPECT_NE(ReadHostFile(backing_ / "latest_checkpointed_iteration.txt"), "100")
      << "the marker whose commit failed was published after all";
}

TEST_F(SharedMountTest, ASlowMemberDelaysTheCommitButNotTheOtherMembersWrites) {
  auto a = Node("a", 0ms);
  FaultInjectingEnv* b_env = nullptr;
  auto b = Node("b", 0ms, &b_env);
  ASSERT_TRUE(a && b);
  b_env->Inject(FaultInjectingEnv::Fault(Env::Op::kSync, 0).Delayed(1500ms));
  ASSERT_TRUE(WriteFile(*b, "__1_0.distcp", Pattern(1, 4096)).ok());
  ASSERT_TRUE(WriteFile(*a, ".metadata", "meta").ok());
  auto committed = std::async(std::launch::async, [&] { return a->Sync(); });

  ASSERT_TRUE(WriteFile(*a, "after.distcp", Pattern(2, 100000)).ok());
  EXPECT_FALSE(Ready(committed)) << "the commit did not wait for the slow member";
  EXPECT_FALSE(OnBacking(".metadata"));

  Status st = committed.get();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(OnBacking(".metadata"));
  EXPECT_TRUE(OnBacking("__1_0.distcp"));
  b_env->Heal();
  EXPECT_TRUE(a->Shutdown().ok());
  EXPECT_TRUE(b->Shutdown().ok());
}

TEST_F(SharedMountTest, AMemberAloneCommitsAtOnceAndListsItselfInItsStats) {
  auto a = Node("a", 0ms);
  ASSERT_TRUE(a);
  ASSERT_TRUE(WriteFile(*a, "metadata.json", "{}").ok());
  EXPECT_TRUE(a->Sync().ok());
  EXPECT_EQ(ReadHostFile(backing_ / "metadata.json"), "{}");
  nlohmann::json shared = SharedStats(*a);
  EXPECT_EQ(shared["node"], "a");
  ASSERT_EQ(shared["members"].size(), 1u);
  EXPECT_EQ(shared["members"][0]["self"], true);
  EXPECT_EQ(shared["pending_commits"].size(), 0u);
  EXPECT_TRUE(a->Shutdown().ok());
  EXPECT_FALSE(OnBacking(".ckptfs/shared/members/a")) << "a clean unmount leaves the group";
}

TEST_F(SharedMountTest, ASecondMountCannotTakeTheNodeNameOfALiveMember) {
  auto a = Node("a", 0ms);
  ASSERT_TRUE(a);
  Config config;
  config.backing_dir = backing_.path();
  config.shared = true;
  config.node = "a";
  config.member_timeout = 1000ms;
  config.poll_interval = 10ms;
  auto second = Filesystem::Make(config, MakeTestEnv());
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().err(), EEXIST) << second.status().ToString();
  EXPECT_TRUE(a->Shutdown().ok());
}

}  // namespace
}  // namespace ckptfs
