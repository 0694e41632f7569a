// Membership through the shared backing directory (core/shared/membership), several members over
// one temp directory standing for several nodes, on a ManualClock.
#include "core/shared/membership.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "core/shared/shared_policy.h"
#include "shared_fixture.h"

namespace ckptfs {
namespace {

using testing_util::HostExists;
using testing_util::kMemberTimeout;
using testing_util::ReadHostFile;
using testing_util::SharedNode;
using testing_util::WriteHostFile;

class MembershipTest : public testing_util::SharedStoreTest {
 protected:
  nlohmann::json MemberFile(const std::string& node) {
    return nlohmann::json::parse(ReadHostFile(SharedPath("members/" + node)).value_or("null"));
  }
  std::vector<std::string> SeenBy(SharedNode& n) {
    std::vector<std::string> names;
    for (const MemberView& v : n.membership->Members()) names.push_back(v.record.node);
    return names;
  }
  // A member file as another node would write it.
  void WriteMember(const std::string& node, const std::string& host, int64_t pid, uint64_t beat,
                   const std::string& incarnation = "0123456789abcdef") {
    WriteHostFile(SharedPath("members/" + node),
                  nlohmann::json{{"node", node}, {"host", host}, {"pid", pid},
                                 {"incarnation", incarnation}, {"beat", beat}, {"sealed", 0},
                                 {"durable", 0}, {"pending_bytes", 0}}
                      .dump());
  }
  std::string Host() {
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    return host;
  }
};

TEST_F(MembershipTest, AMemberJoinsBeatsWithItsProgressAndLeavesThroughItsOwnFile) {
  SharedNode& a = Start("a");
  nlohmann::json file = MemberFile("a");
  EXPECT_EQ(file["node"], "a");
  EXPECT_EQ(file["pid"], getpid());
  EXPECT_EQ(file["beat"], 1);
  EXPECT_EQ(file["incarnation"], a.membership->self().incarnation);

  a.progress = {12, 7, 4096};
  TickAll();
  file = MemberFile("a");
  EXPECT_EQ(file["beat"], 2);
  EXPECT_EQ(file["sealed"], 12);
  EXPECT_EQ(file["durable"], 7);
  EXPECT_EQ(file["pending_bytes"], 4096);

  ASSERT_TRUE(a.membership->Leave().ok());
  EXPECT_FALSE(HostExists(SharedPath("members/a")));
  EXPECT_EQ(a.membership->state(), Membership::State::kOut);
}

TEST_F(MembershipTest, MembersSeeEachOtherWithTheHeartbeatAgeOfTheirOwnClock) {
  SharedNode& a = Start("a");
  SharedNode& b = Start("b");
  TickAll();
  EXPECT_EQ(SeenBy(a), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(SeenBy(b), (std::vector<std::string>{"b", "a"}));
  b.running = false;
  TickAll();  // a reads the beat b wrote after a's read of the first tick.
  TickAll(3);
  std::vector<MemberView> views = a.membership->Members();
  ASSERT_EQ(views.size(), 2u);
  EXPECT_TRUE(views[0].self);
  EXPECT_EQ(views[0].beat_age, Clock::duration(0));
  EXPECT_EQ(views[1].record.node, "b");
  EXPECT_EQ(views[1].beat_age, std::chrono::seconds(3));
}

TEST_F(MembershipTest, AMemberWhoseBeatCounterStandsStillForMemberTimeoutIsDeadAndItsFileRemoved) {
  SharedNode& a = Start("a");
  SharedNode& b = Start("b");
  TickAll();
  const MemberId old_b = b.membership->self();
  b.running = false;
  TickAll();  // a reads b's last beat.
  TickAll(9);
  EXPECT_EQ(a.membership->Judge(old_b), Liveness::kLive) << "9 s without a beat: still live";
  TickAll();
  EXPECT_EQ(a.membership->Judge(old_b), Liveness::kDead);
  EXPECT_FALSE(HostExists(SharedPath("members/b"))) << "a dead member's file is removed";
  EXPECT_EQ(SeenBy(a), std::vector<std::string>{"a"});
}

TEST_F(MembershipTest, LivenessFollowsTheBeatCounterNotTheFilesTimes) {
  SharedNode& a = Start("a");
  WriteMember("far", "far-host", 1, 1);
  TickAll();
  for (int i = 0; i < 12; ++i) {
    // The far node's clock says 1970, its counter moves: live.
    WriteMember("far", "far-host", 1, 2 + i);
    timespec times[2] = {{0, 0}, {0, 0}};
    ASSERT_EQ(utimensat(AT_FDCWD, SharedPath("members/far").c_str(), times, 0), 0);
    TickAll();
  }
  EXPECT_EQ(a.membership->Judge({"far", "0123456789abcdef"}), Liveness::kLive);
  for (int i = 0; i < 10; ++i) {
    // Touched now, counter still: dead after member_timeout.
    ASSERT_EQ(utimensat(AT_FDCWD, SharedPath("members/far").c_str(), nullptr, 0), 0);
    TickAll();
  }
  EXPECT_EQ(a.membership->Judge({"far", "0123456789abcdef"}), Liveness::kDead);
}

TEST_F(MembershipTest, AMemberPublishesWhereItReceivesReplicasAndTheOthersSeeIt) {
  SharedNode& a = Start("a", "10.251.7.1:40001");
  SharedNode& b = Start("b");
  TickAll();
  EXPECT_EQ(MemberFile("a")["replication"], "10.251.7.1:40001");
  EXPECT_FALSE(MemberFile("b").contains("replication")) << "optional: only with -o replicas";
  std::vector<MemberView> seen = b.membership->Members();
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[1].record.node, "a");
  EXPECT_EQ(seen[1].record.replication_endpoint, "10.251.7.1:40001");
  EXPECT_EQ(a.membership->Members()[0].record.replication_endpoint, "10.251.7.1:40001");
}

TEST_F(MembershipTest, AMemberFileWithAMalformedReplicationEndpointIsNotAMemberFile) {
  SharedNode& a = Start("a");
  for (const nlohmann::json& bad : {nlohmann::json(5), nlohmann::json(std::string(65, '1')),
                                    nlohmann::json::array()}) {
    WriteHostFile(SharedPath("members/c"),
                  nlohmann::json{{"node", "c"}, {"host", "h"}, {"pid", 1},
                                 {"incarnation", "0123456789abcdef"}, {"beat", 1}, {"sealed", 0},
                                 {"durable", 0}, {"pending_bytes", 0}, {"replication", bad}}
                      .dump());
    TickAll();
    EXPECT_EQ(SeenBy(a), std::vector<std::string>{"a"}) << bad.dump();
  }
}

TEST_F(MembershipTest, AMemberWhoseFileTurnedToGarbageIsJudgedDeadByTheSameRule) {
  SharedNode& a = Start("a");
  SharedNode& b = Start("b");
  TickAll();
  const MemberId old_b = b.membership->self();
  b.running = false;
  TickAll();  // a reads b's last beat.
  WriteHostFile(SharedPath("members/b"), "\x01garbage");
  TickAll(9);
  EXPECT_EQ(a.membership->Judge(old_b), Liveness::kLive);
  TickAll();
  EXPECT_EQ(a.membership->Judge(old_b), Liveness::kDead);
  EXPECT_TRUE(HostExists(SharedPath("members/b"))) << "what it cannot read, it leaves alone";
}

TEST_F(MembershipTest, AMemberThatLeavesIsSeenAsLeft) {
  SharedNode& a = Start("a");
  SharedNode& b = Start("b");
  TickAll();
  const MemberId old_b = b.membership->self();
  ASSERT_TRUE(b.membership->Leave().ok());
  b.running = false;
  TickAll();
  EXPECT_EQ(a.membership->Judge(old_b), Liveness::kLeft);
  EXPECT_EQ(SeenBy(a), std::vector<std::string>{"a"});
}

TEST_F(MembershipTest, ASecondMountWithTheNodeNameOfALiveMemberIsRefusedWithEexist) {
  Start("n");
  SharedNode& second = Open("n");
  Status joined = second.membership->Join();
  EXPECT_EQ(joined.err(), EINPROGRESS) << joined.ToString();
  TickAll(2);
  EXPECT_EQ(second.membership->state(), Membership::State::kRefused);
  Status refused = second.membership->Tick();
  EXPECT_EQ(refused.err(), EEXIST);
  EXPECT_NE(refused.message().find("node name n is in use"), std::string::npos)
      << refused.message();
  EXPECT_NE(refused.message().find("pid " + std::to_string(getpid())), std::string::npos);
}

TEST_F(MembershipTest, ANodeNameWhoseFileStoppedBeatingIsTakenOverAfterMemberTimeout) {
  SharedNode& first = Start("n");
  first.running = false;  // Hung, its process still alive.
  SharedNode& second = Open("n");
  EXPECT_EQ(second.membership->Join().err(), EINPROGRESS);
  TickAll(9);
  EXPECT_EQ(second.membership->state(), Membership::State::kClaiming);
  TickAll();
  EXPECT_EQ(second.membership->state(), Membership::State::kJoined);
  EXPECT_EQ(MemberFile("n")["incarnation"], second.membership->self().incarnation);
  EXPECT_NE(second.membership->self().incarnation, first.membership->self().incarnation);
}

TEST_F(MembershipTest, ANodeNameLeftByAGoneProcessOfThisHostIsTakenOverAtOnce) {
  WriteMember("n", Host(), testing_util::DeadPid(), 40);
  WriteHostFile(SharedPath("members/.n.00000000000000aa.tmp"), "{\"node\": \"n\"");
  WriteHostFile(SharedPath("members/.n.b.00000000000000aa.tmp"), "{\"node\": \"n.b\"");
  SharedNode& n = Open("n");
  Status joined = n.membership->Join();
  EXPECT_TRUE(joined.ok()) << joined.ToString();
  EXPECT_EQ(MemberFile("n")["pid"], getpid());
  EXPECT_FALSE(HostExists(SharedPath("members/.n.00000000000000aa.tmp")))
      << "the killed run's temporary file is removed";
  EXPECT_TRUE(HostExists(SharedPath("members/.n.b.00000000000000aa.tmp"))) << "node n.b's is not";
}

TEST_F(MembershipTest, AnInvalidFileUnderTheNodeNameIsTakenOverButAnUnreadableOneFailsJoin) {
  WriteHostFile(SharedPath("members/n"), "garbage");
  SharedNode& n = Open("n");
  n.env.Inject(FaultInjectingEnv::Fault(Env::Op::kOpen, EIO).Named("n").Times(1));
  Status failed = n.membership->Join();
  EXPECT_EQ(failed.err(), EIO) << failed.ToString();
  EXPECT_EQ(n.membership->state(), Membership::State::kOut);
  Status joined = n.membership->Join();
  EXPECT_TRUE(joined.ok()) << joined.ToString();
  EXPECT_EQ(MemberFile("n")["incarnation"], n.membership->self().incarnation);
}

TEST_F(MembershipTest, NodeNamesThatCouldLeaveTheMembersDirectoryAreRefused) {
  for (const std::string& bad : std::vector<std::string>{
           "", ".", "..", "../x", "a/b", "/abs", ".hidden", "a b", "a\nb", "a~1",
           std::string(65, 'x'), std::string("a\0b", 3)}) {
    EXPECT_FALSE(policy::IsValidNodeName(bad)) << bad;
    Result<std::unique_ptr<SharedDirectory>> area = SharedDirectory::Open(env_, root_fd_);
    ASSERT_TRUE(area.ok());
    Result<std::unique_ptr<Membership>> m =
        Membership::Open(**area, {bad, kMemberTimeout, ""}, clock_, [] {
          return FlushProgress{};
        });
    EXPECT_EQ(m.status().err(), EINVAL) << bad;
    if (!bad.empty()) {
      EXPECT_EQ(NodeNameOrHostName(bad).status().err(), EINVAL) << bad;
    }
  }
  for (const std::string& good :
       std::vector<std::string>{"node-3", "gpu017.cluster.example", "A_b", std::string(64, 'x')}) {
    EXPECT_TRUE(policy::IsValidNodeName(good)) << good;
  }
  Result<std::string> host = NodeNameOrHostName("");
  if (host.ok()) {
    EXPECT_EQ(*host, Host());
  }
}

TEST_F(MembershipTest, GarbageAndHostileFilesInTheMembersDirectoryAreIgnored) {
  SharedNode& a = Start("a");
  SharedNode& b = Start("b");
  const std::string dir = SharedPath("members/");
  WriteHostFile(dir + "garbage", "{not json");
  WriteHostFile(dir + "array", "[1, 2, 3]");
  WriteHostFile(dir + "huge", std::string(policy::kMaxMemberFileBytes + 1, ' '));
  WriteHostFile(dir + "other", R"({"node": "someone-else", "host": "h", "pid": 1,
      "incarnation": "0123456789abcdef", "beat": 1, "sealed": 0, "durable": 0,
      "pending_bytes": 0})");
  WriteHostFile(dir + "types", R"({"node": "types", "host": 7, "pid": -1, "incarnation": "x",
      "beat": "many", "sealed": 0, "durable": 0, "pending_bytes": 0})");
  WriteHostFile(dir + "bad name", "{}");
  ASSERT_EQ(symlink("/etc/passwd", (dir + "link").c_str()), 0);
  ASSERT_EQ(mkfifo((dir + "fifo").c_str(), 0644), 0);
  ASSERT_EQ(mkdir((dir + "directory").c_str(), 0755), 0);
  TickAll(3);
  EXPECT_EQ(SeenBy(a), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(b.membership->Judge({"other", "0123456789abcdef"}), Liveness::kUnknown);
  EXPECT_TRUE(HostExists(dir + "garbage")) << "files that are not members are left alone";
}

TEST_F(MembershipTest, AFloodOfNamesThatAreNotMembersDoesNotHideTheMembers) {
  SharedNode& a = Start("a");
  for (size_t i = 0; i < policy::kMaxMembers + 100; ++i) {
    WriteHostFile(SharedPath("members/0 flood " + std::to_string(i)), "");
  }
  Start("z");
  TickAll();
  EXPECT_EQ(SeenBy(a), (std::vector<std::string>{"a", "z"}));
}

TEST_F(MembershipTest, AMemberThatStalledPastMemberTimeoutRejoinsAsANewIncarnation) {
  SharedNode& a = Start("a");
  SharedNode& b = Start("b");
  TickAll();
  const MemberId stalled = b.membership->self();
  b.running = false;
  TickAll(11);
  ASSERT_FALSE(HostExists(SharedPath("members/b")));
  b.running = true;
  TickAll();
  EXPECT_EQ(b.membership->state(), Membership::State::kJoined);
  EXPECT_NE(b.membership->self().incarnation, stalled.incarnation);
  TickAll();
  EXPECT_EQ(a.membership->Judge(b.membership->self()), Liveness::kLive);
  EXPECT_EQ(a.membership->Judge(stalled), Liveness::kDead) << "never live again";
}

TEST_F(MembershipTest, AMemberWhoseStalledBeatLandedAfterItWasJudgedDeadLearnsItAndRejoins) {
  SharedNode& a = Start("a");
  SharedNode& b = Start("b");
  TickAll();
  const MemberId stalled = b.membership->self();
  nlohmann::json landing = MemberFile("b");
  b.running = false;  // Its beat's rename stalls on the store...
  TickAll(11);
  ASSERT_EQ(a.membership->Judge(stalled), Liveness::kDead);
  ASSERT_FALSE(HostExists(SharedPath("members/b")));
  landing["beat"] = landing["beat"].get<uint64_t>() + 1;  // ...and lands after the judgement.
  WriteHostFile(SharedPath("members/b"), landing.dump());
  b.running = true;
  TickAll();
  EXPECT_NE(b.membership->self().incarnation, stalled.incarnation)
      << "b went on under the incarnation the others hold dead";
  EXPECT_TRUE(b.membership->IsOwnIncarnation(stalled.incarnation));
  EXPECT_EQ(MemberFile("b")["former"], nlohmann::json::array({stalled.incarnation}));
  TickAll();
  EXPECT_EQ(a.membership->Judge(b.membership->self()), Liveness::kLive);
  EXPECT_TRUE(a.membership->MayStillAcknowledge(stalled))
      << "it continues the incarnation a judged dead";
}

TEST_F(MembershipTest, AMemberWhoseFileIsNotItsOwnForHalfTheTimeoutRejoinsBeforeAnyoneJudgesIt) {
  SharedNode& a = Start("a");
  SharedNode& b = Start("b");
  TickAll();
  const MemberId first = b.membership->self();
  // Something else keeps writing b's file: each of b's beats is overwritten before a reads it.
  for (int i = 0; i < 3; ++i) {
    WriteHostFile(SharedPath("members/b"), "\x01garbage");
    TickAll();
  }
  EXPECT_EQ(b.membership->self(), first) << "4 s without its beat in place is no cause";
  WriteHostFile(SharedPath("members/b"), "\x01garbage");
  TickAll();
  EXPECT_NE(b.membership->self(), first);
  EXPECT_EQ(a.membership->Judge(first), Liveness::kLive) << "it learned before a judged it";
  TickAll();
  EXPECT_EQ(a.membership->Judge(b.membership->self()), Liveness::kLive);
  EXPECT_EQ(a.membership->Judge(first), Liveness::kLeft);
  EXPECT_TRUE(a.membership->MayStillAcknowledge(first));
}

TEST_F(MembershipTest, AMemberWhoseTemporaryFileIsASymlinkBeatsOnUnderANewIncarnation) {
  SharedNode& a = Start("a");
  SharedNode& b = Start("b");
  TickAll();
  const MemberId first = b.membership->self();
  const std::string temp = SharedPath("members/.b." + first.incarnation + ".tmp");
  ASSERT_EQ(symlink("/etc/passwd", temp.c_str()), 0);
  TickAll(6);
  EXPECT_NE(b.membership->self(), first);
  TickAll();
  EXPECT_EQ(a.membership->Judge(b.membership->self()), Liveness::kLive);
  EXPECT_TRUE(a.membership->MayStillAcknowledge(first));
  EXPECT_EQ(ReadHostFile("/etc/passwd").value_or("").find("incarnation"), std::string::npos);
}

TEST_F(MembershipTest, AMemberJudgedDeadIsAwaitedForMemberTimeoutThenCountsAsGone) {
  SharedNode& a = Start("a");
  SharedNode& b = Start("b");
  TickAll();
  const MemberId gone = b.membership->self();
  b.running = false;
  TickAll(11);
  ASSERT_EQ(a.membership->Judge(gone), Liveness::kDead);
  EXPECT_EQ(a.membership->AwaitedMembers(), std::vector<MemberId>{gone});
  EXPECT_TRUE(a.membership->MayStillAcknowledge(gone));
  TickAll(9);
  EXPECT_TRUE(a.membership->MayStillAcknowledge(gone));
  TickAll();
  EXPECT_TRUE(a.membership->AwaitedMembers().empty());
  EXPECT_FALSE(a.membership->MayStillAcknowledge(gone));
}

TEST_F(MembershipTest, AMemberThatLeftCleanlyIsNeitherAwaitedNorWaitedFor) {
  SharedNode& a = Start("a");
  SharedNode& b = Start("b");
  TickAll();
  const MemberId left = b.membership->self();
  ASSERT_TRUE(b.membership->Leave().ok());
  b.running = false;
  TickAll();
  EXPECT_TRUE(a.membership->AwaitedMembers().empty());
  EXPECT_FALSE(a.membership->MayStillAcknowledge(left));
}

TEST_F(MembershipTest, MoreNodeNamesThanTheBoundFailTheObservationLoudlyAndJudgeNobody) {
  SharedNode& a = Start("a");
  SharedNode& b = Start("b");
  TickAll();
  for (size_t i = 0; i < policy::kMaxMembers; ++i) {
    WriteHostFile(SharedPath("members/x" + std::to_string(i)), "");
  }
  EXPECT_EQ(a.membership->Observe().err(), EUSERS);
  TickAll(12);
  EXPECT_EQ(a.membership->Judge(b.membership->self()), Liveness::kLive)
      << "b fell off a listing cut at the bound and was taken for gone";
  for (size_t i = 0; i < policy::kMaxMembers; ++i) {
    std::filesystem::remove(SharedPath("members/x" + std::to_string(i)));
  }
  EXPECT_TRUE(a.membership->Observe().ok());
  TickAll();
  EXPECT_EQ(SeenBy(a), (std::vector<std::string>{"a", "b"}));
}

TEST_F(MembershipTest, AFailedBeatIsReportedAndRetriedWhileTheMemberStaysJoined) {
  SharedNode& a = Start("a");
  a.env.Inject(FaultInjectingEnv::Fault(Env::Op::kRename, EIO).Named("a"));
  clock_.Advance(testing_util::kTickStep);
  EXPECT_EQ(a.membership->Tick().err(), EIO);
  EXPECT_EQ(a.membership->state(), Membership::State::kJoined);
  EXPECT_EQ(MemberFile("a")["beat"], 1);
  a.env.Heal();
  clock_.Advance(testing_util::kTickStep);
  EXPECT_TRUE(a.membership->Tick().ok());
  EXPECT_EQ(MemberFile("a")["beat"], 2);
}

}  // namespace
}  // namespace ckptfs
