// The commit of markers across members (core/shared/shared_commit): several members over one temp
// directory standing for several nodes, on a ManualClock, each member's journal progress set by
// the test.
#include "core/base/commit_markers.h"
#include "core/shared/shared_commit.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/replication/stand_in.h"
#include "core/shared/shared_policy.h"
#include "shared_fixture.h"

namespace ckptfs {
namespace {

using testing_util::HostExists;
using testing_util::HostList;
using testing_util::ReadHostFile;
using testing_util::SharedNode;
using testing_util::WriteHostFile;

class SharedCommitTest : public testing_util::SharedStoreTest {
 protected:
  // Three joined members that have seen each other.
  void StartThree() {
    a_ = &Start("a");
    b_ = &Start("b");
    c_ = &Start("c");
    TickAll();
  }
  std::string Post(SharedNode& n, const std::string& marker) {
    Result<std::string> id = n.commits->Post(marker);
    EXPECT_TRUE(id.ok()) << id.status().ToString();
    return id.ok() ? *id : "";
  }
  std::vector<std::string> Requests() {
    std::vector<std::string> names = HostList(SharedPath("commits"));
    std::sort(names.begin(), names.end());
    return names;
  }
  // A member file written by hand, for a member no instance stands for.
  void WriteMember(const std::string& node, const std::string& incarnation, uint64_t beat) {
    WriteHostFile(SharedPath("members/" + node),
                  nlohmann::json{{"node", node}, {"host", "far"}, {"pid", 1},
                                 {"incarnation", incarnation}, {"beat", beat}, {"sealed", 0},
                                 {"durable", 0}, {"pending_bytes", 0}}
                      .dump());
  }

  std::pair<SharedNode*, std::string> KillBAndTakeOver(bool takeover_lost);

  SharedNode* a_ = nullptr;
  SharedNode* b_ = nullptr;
  SharedNode* c_ = nullptr;
};

TEST(CommitIdTest, IdsRoundTripAndAnythingElseIsRefused) {
  std::string id = policy::MakeCommitId("gpu-7.example", "0123456789abcdef", 42);
  policy::CommitIdParts parts;
  ASSERT_TRUE(policy::ParseCommitId(id, &parts));
  EXPECT_EQ(parts.node, "gpu-7.example");
  EXPECT_EQ(parts.incarnation, "0123456789abcdef");
  EXPECT_EQ(parts.counter, 42u);
  for (const char* bad :
       {"", "a", "a~0123456789abcdef", "a~0123456789abcdef~", "a~0123456789abcdef~01",
        "a~0123456789ABCDEF~1", "a~0123~1", "..~0123456789abcdef~1", "a/b~0123456789abcdef~1",
        "a~0123456789abcdef~1~2", "a~0123456789abcdef~99999999999999999999",
        ".a~0123456789abcdef~1"}) {
    EXPECT_FALSE(policy::ParseCommitId(bad, &parts)) << bad;
  }
}

TEST(CommitMarkerTest, TheDefaultMarkersAreTheTrackersAndMetadataOfTheSavers) {
  const std::vector<std::string> markers = policy::DefaultCommitMarkers();
  for (const char* name : {".metadata", "metadata.json", "latest_checkpointed_iteration.txt",
                           "latest_iteration.txt", "dlrover_latest.txt"}) {
    EXPECT_TRUE(policy::IsCommitMarker(name, markers)) << name;
  }
  EXPECT_FALSE(policy::IsCommitMarker("__0_0.distcp", markers));
  EXPECT_FALSE(policy::IsCommitMarker("model_optim_rng.pt", markers));
}

TEST_F(SharedCommitTest, ACommitWaitsUntilEachMemberMadeDurableWhatItHadSealedOnSeeingIt) {
  StartThree();
  b_->progress = {10, 5, 1 << 20};
  c_->progress = {7, 7, 0};
  const std::string id = Post(*a_, "ckpt/latest_checkpointed_iteration.txt");
  EXPECT_EQ(Requests(), std::vector<std::string>{id});
  TickAll();  // b takes sealed point 10, c acknowledges at once.
  b_->progress = {20, 9, 1 << 20};  // Sealed after it saw the request: not waited for.
  TickAll(3);
  EXPECT_TRUE(a_->outcomes.empty());
  std::vector<PendingCommit> pending = a_->commits->Pending();
  ASSERT_EQ(pending.size(), 1u);
  EXPECT_EQ(pending[0].waiting_for, std::vector<std::string>{"b"});
  EXPECT_EQ(pending[0].marker, "ckpt/latest_checkpointed_iteration.txt");
  EXPECT_EQ(b_->commits->acks_owed(), 1u);

  b_->progress = {20, 10, 1 << 19};
  TickAll();  // a ticks first: b's ack lands after a's look.
  EXPECT_TRUE(a_->outcomes.empty());
  nlohmann::json ack = nlohmann::json::parse(
      ReadHostFile(SharedPath("commits/" + id + "/ack.b")).value_or("null"));
  EXPECT_EQ(ack["sealed"], 10);
  EXPECT_EQ(ack["incarnation"], b_->membership->self().incarnation);
  TickAll();
  ASSERT_EQ(a_->outcomes.size(), 1u);
  EXPECT_EQ(a_->outcomes[0].id, id);
  EXPECT_TRUE(a_->outcomes[0].status.ok()) << a_->outcomes[0].status.ToString();
  EXPECT_TRUE(Requests().empty()) << "the committer removes its request and the acks";
  EXPECT_TRUE(a_->commits->Pending().empty());
  TickAll();
  EXPECT_EQ(a_->outcomes.size(), 1u) << "each outcome is reported once";
  EXPECT_EQ(b_->commits->acks_owed(), 0u);
}

// b's process dies after a posted a request awaiting it; the process that takes over b's state
// (a crashed worker's successor) joins under a new incarnation. `takeover_lost`: its takeover
// lost part of what b had sealed. Returns the successor and the request's id.
std::pair<SharedNode*, std::string> SharedCommitTest::KillBAndTakeOver(bool takeover_lost) {
  StartThree();
  b_->progress = {10, 5, 0};
  const std::string id = Post(*a_, "ckpt/.metadata");
  const MemberId dead = b_->membership->self();
  b_->running = false;
  nlohmann::json file =
      nlohmann::json::parse(ReadHostFile(SharedPath("members/b")).value_or("null"));
  file["pid"] = testing_util::DeadPid();
  WriteHostFile(SharedPath("members/b"), file.dump());
  SharedNode& successor = Open("b", "", /*takes_over=*/true);
  successor.progress = {10, 5, 0};  // What its replay of b's log sealed again.
  Status joined = successor.membership->Join();
  EXPECT_TRUE(joined.ok()) << joined.ToString();
  EXPECT_TRUE(successor.membership->IsOwnIncarnation(dead.incarnation));
  if (takeover_lost) successor.membership->ForgetPredecessor();
  return {&successor, id};
}

TEST_F(SharedCommitTest, AWorkerThatTookOverACrashedOnesStateAcknowledgesForIt) {
  auto [successor, id] = KillBAndTakeOver(/*takeover_lost=*/false);
  TickAll(3);
  EXPECT_TRUE(a_->outcomes.empty()) << "its sealed point is not durable yet";
  successor->progress = {10, 10, 0};
  TickAll(3);
  ASSERT_EQ(a_->outcomes.size(), 1u);
  EXPECT_EQ(a_->outcomes[0].id, id);
  EXPECT_TRUE(a_->outcomes[0].status.ok()) << a_->outcomes[0].status.ToString();
}

TEST_F(SharedCommitTest, AWorkerWhoseTakeoverLostDataFailsTheCommitsAwaitingTheCrashedOne) {
  auto [successor, id] = KillBAndTakeOver(/*takeover_lost=*/true);
  EXPECT_EQ(nlohmann::json::parse(ReadHostFile(SharedPath("members/b")).value_or("null"))["former"],
            nlohmann::json::array());
  successor->progress = {10, 10, 0};
  TickAll(3);
  ASSERT_EQ(a_->outcomes.size(), 1u);
  EXPECT_EQ(a_->outcomes[0].status.err(), EHOSTDOWN) << a_->outcomes[0].status.ToString();
}

TEST_F(SharedCommitTest, AMemberThatDiesBeforeAcknowledgingFailsTheCommitNamingIt) {
  StartThree();
  b_->progress = {10, 5, 0};
  const std::string id = Post(*a_, "ckpt/.metadata");
  TickAll();  // b sees the request, c acknowledges.
  b_->running = false;
  TickAll(10);
  EXPECT_TRUE(a_->outcomes.empty()) << "b is not judged dead yet";
  TickAll(10);
  EXPECT_TRUE(a_->outcomes.empty()) << "b was judged dead less than member_timeout ago";
  TickAll(2);
  ASSERT_EQ(a_->outcomes.size(), 1u);
  const Status& st = a_->outcomes[0].status;
  EXPECT_EQ(st.err(), EHOSTDOWN);
  // c judged b dead first and removed its file: a may see b dead or gone.
  EXPECT_NE(st.message().find("member b "), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("before it acknowledged"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("ckpt/.metadata"), std::string::npos) << st.message();
  EXPECT_TRUE(Requests().empty());
}

TEST_F(SharedCommitTest, ACommitPostedAfterAStalledMemberWasJudgedDeadWaitsForItsData) {
  StartThree();
  b_->progress = {10, 5, 0};
  b_->running = false;  // b's beats stall on the store; its trainer goes on closing files.
  TickAll(11);
  ASSERT_EQ(a_->membership->Judge(b_->membership->self()), Liveness::kDead);
  const std::string stalled = b_->membership->self().incarnation;
  const std::string id = Post(*a_, "ckpt/latest_checkpointed_iteration.txt");
  b_->running = true;
  TickAll(3);
  EXPECT_NE(b_->membership->self().incarnation, stalled) << "b rejoined";
  EXPECT_TRUE(a_->outcomes.empty()) << "committed without b's data, sealed before the marker";
  b_->progress = {12, 10, 0};
  TickAll(2);
  ASSERT_EQ(a_->outcomes.size(), 1u);
  EXPECT_TRUE(a_->outcomes[0].status.ok()) << a_->outcomes[0].status.ToString();
}

TEST_F(SharedCommitTest, AMemberThatRejoinedAcknowledgesForTheIncarnationACommitAwaited) {
  StartThree();
  b_->progress = {10, 5, 0};
  const std::string id = Post(*a_, "ckpt/.metadata");
  const std::string awaited = b_->membership->self().incarnation;
  TickAll();  // b takes its sealed point.
  b_->running = false;
  TickAll(11);  // Judged dead and its file removed: it rejoins when it runs again.
  b_->running = true;
  TickAll();
  ASSERT_NE(b_->membership->self().incarnation, awaited);
  b_->progress = {11, 10, 0};
  TickAll();
  nlohmann::json ack = nlohmann::json::parse(
      ReadHostFile(SharedPath("commits/" + id + "/ack.b")).value_or("null"));
  EXPECT_EQ(ack["incarnation"], awaited);
  EXPECT_EQ(ack["sealed"], 10);
  TickAll();
  ASSERT_EQ(a_->outcomes.size(), 1u);
  EXPECT_TRUE(a_->outcomes[0].status.ok()) << a_->outcomes[0].status.ToString();
}

TEST_F(SharedCommitTest, AMemberThatLeavesBeforeAcknowledgingFailsTheCommit) {
  StartThree();
  b_->progress = {10, 5, 0};
  Post(*a_, "ckpt/.metadata");
  TickAll();
  ASSERT_TRUE(b_->membership->Leave().ok());
  b_->running = false;
  TickAll(2);
  ASSERT_EQ(a_->outcomes.size(), 1u);
  EXPECT_EQ(a_->outcomes[0].status.err(), EHOSTDOWN);
  EXPECT_NE(a_->outcomes[0].status.message().find("member b left"), std::string::npos)
      << a_->outcomes[0].status.message();
}

TEST_F(SharedCommitTest, ASlowMemberThatStillBeatsOnlyDelaysTheCommit) {
  StartThree();
  // b's storage: its durable point lags far behind for longer than member_timeout...
  b_->progress = {10, 0, 8 << 20};
  Post(*a_, "ckpt/latest_checkpointed_iteration.txt");
  TickAll(15);
  EXPECT_TRUE(a_->outcomes.empty());
  // ...then its acknowledgement cannot be written for longer than member_timeout.
  b_->progress = {10, 10, 0};
  b_->env.Inject(FaultInjectingEnv::Fault(Env::Op::kRename, EIO).Named("ack.b"));
  TickAll(15);
  EXPECT_TRUE(a_->outcomes.empty());
  ASSERT_EQ(a_->commits->Pending().size(), 1u);
  EXPECT_EQ(a_->commits->Pending()[0].waiting_for, std::vector<std::string>{"b"});
  EXPECT_EQ(a_->commits->Pending()[0].age, std::chrono::seconds(30));
  EXPECT_GT(b_->env.calls(Env::Op::kRename), 15u);
  b_->env.Heal();
  TickAll(2);
  ASSERT_EQ(a_->outcomes.size(), 1u);
  EXPECT_TRUE(a_->outcomes[0].status.ok()) << a_->outcomes[0].status.ToString();
}

TEST_F(SharedCommitTest, AMemberAloneCommitsOnItsNextTickWithoutFiles) {
  SharedNode& a = Start("a");
  const std::string id = Post(a, "latest");
  EXPECT_TRUE(Requests().empty());
  TickAll();
  ASSERT_EQ(a.outcomes.size(), 1u);
  EXPECT_EQ(a.outcomes[0].id, id);
  EXPECT_TRUE(a.outcomes[0].status.ok());
}

TEST_F(SharedCommitTest, AMemberThatJoinedAfterTheRequestIsNotAwaited) {
  StartThree();
  Post(*a_, "ckpt/.metadata");
  SharedNode& d = Start("d");
  d.progress = {50, 0, 0};
  TickAll(2);
  ASSERT_EQ(a_->outcomes.size(), 1u);
  EXPECT_TRUE(a_->outcomes[0].status.ok()) << a_->outcomes[0].status.ToString();
  EXPECT_EQ(d.commits->acks_owed(), 0u);
}

TEST_F(SharedCommitTest, TheStaleRequestOfADeadCommitterIsRemovedByTheOthers) {
  StartThree();
  b_->progress = {10, 5, 0};
  const std::string id = Post(*a_, "ckpt/.metadata");
  TickAll();
  a_->running = false;  // Killed with its request posted.
  // A committer killed in the middle of posting, never seen beating by anyone.
  const std::string half = policy::MakeCommitId("gone", "00000000000000ff", 3);
  WriteHostFile(SharedPath("commits/" + half + "/.request.tmp"), "{\"id\":");
  TickAll(3);
  EXPECT_EQ(Requests(), (std::vector<std::string>{id, half}));
  EXPECT_EQ(b_->commits->acks_owed(), 1u);
  TickAll(9);
  EXPECT_TRUE(Requests().empty());
  EXPECT_EQ(b_->commits->acks_owed(), 0u) << "a request removed is forgotten";
}

TEST_F(SharedCommitTest, ARequestOfAnEarlierRunOfTheSameNodeIsRemovedAtOnce) {
  StartThree();
  const std::string earlier = policy::MakeCommitId("b", "00000000000000aa", 1);
  WriteHostFile(SharedPath("commits/" + earlier + "/request"), "{}");
  TickAll();
  EXPECT_TRUE(Requests().empty());
}

TEST_F(SharedCommitTest, AMemberRestartedUnderTheSameNameDoesNotAcknowledgeForItsEarlierRun) {
  StartThree();
  b_->progress = {10, 5, 0};
  const std::string id = Post(*a_, "ckpt/.metadata");
  TickAll();
  b_->running = false;  // Killed before its data was durable...
  SharedNode& b2 = Open("b");  // ...and restarted with an empty journal.
  EXPECT_EQ(b2.membership->Join().err(), EINPROGRESS);
  for (int i = 0; i < 12 && a_->outcomes.empty(); ++i) {
    TickAll();
    EXPECT_FALSE(HostExists(SharedPath("commits/" + id + "/ack.b")));
  }
  ASSERT_EQ(a_->outcomes.size(), 1u);
  EXPECT_EQ(a_->outcomes[0].status.err(), EHOSTDOWN);
  EXPECT_NE(a_->outcomes[0].status.message().find("member b"), std::string::npos);
}

TEST_F(SharedCommitTest, GarbageAndHostileEntriesInTheCommitsDirectoryAreIgnored) {
  StartThree();
  b_->progress = {10, 5, 0};
  c_->progress = {10, 5, 0};
  const std::string id = Post(*a_, "ckpt/.metadata");
  // A member that joined after the request (not awaited), whose own requests are all hostile.
  const std::string far_incarnation = "00000000000000fa";
  uint64_t far_beat = 1;
  WriteMember("far", far_incarnation, far_beat);
  TickAll();
  const std::string commits = SharedPath("commits/");
  WriteHostFile(commits + "not-an-id", "x");
  ASSERT_EQ(mkdir((commits + "a~zzzz~1").c_str(), 0755), 0);
  auto far_request = [&](int n) {
    return commits + policy::MakeCommitId("far", far_incarnation, n);
  };
  ASSERT_EQ(symlink("/etc", far_request(1).c_str()), 0);
  WriteHostFile(far_request(2) + "/request", "{not json");
  WriteHostFile(far_request(3) + "/request", std::string(policy::kMaxRequestFileBytes + 1, ' '));
  const std::string awaits_b =
      nlohmann::json{{"node", "b"}, {"incarnation", b_->membership->self().incarnation}}.dump();
  WriteHostFile(far_request(4) + "/request",
                R"({"id": "someone-else~00000000000000fa~4", "committer": "far",
                    "incarnation": "00000000000000fa", "marker": "m", "awaited": [)" +
                    awaits_b + "]}");
  WriteHostFile(far_request(5) + "/request",
                R"({"id": "far~00000000000000fa~5", "committer": "far", "incarnation":
                    "00000000000000fa", "marker": "m",
                    "awaited": [{"node": "../b", "incarnation": 1}]})");
  auto forged_ack = [](const std::string& node) {
    return nlohmann::json{{"node", node}, {"incarnation", "00000000000000cc"}, {"sealed", 0}}
        .dump();
  };
  WriteHostFile(commits + id + "/ack.b", "garbage");
  WriteHostFile(commits + id + "/ack.c", forged_ack("c"));
  WriteHostFile(commits + id + "/ack.stranger", forged_ack("stranger"));
  TickAll(3);
  WriteMember("far", far_incarnation, ++far_beat);
  EXPECT_TRUE(a_->outcomes.empty()) << "forged acks count for nothing";
  for (int n = 2; n <= 5; ++n) {
    EXPECT_FALSE(HostExists(far_request(n) + "/ack.b")) << n;
    EXPECT_FALSE(HostExists(far_request(n) + "/ack.c")) << n;
  }
  EXPECT_TRUE(HostExists("/etc/passwd"));
  b_->progress = {10, 10, 0};
  c_->progress = {10, 10, 0};
  TickAll(2);
  WriteMember("far", far_incarnation, ++far_beat);
  ASSERT_EQ(a_->outcomes.size(), 1u);
  EXPECT_TRUE(a_->outcomes[0].status.ok()) << a_->outcomes[0].status.ToString();
}

TEST_F(SharedCommitTest, AFloodOfNamesThatAreNotRequestsDoesNotHideTheRequests) {
  StartThree();
  for (size_t i = 0; i < policy::kMaxCommitRequests + 100; ++i) {
    WriteHostFile(SharedPath("commits/0-flood-" + std::to_string(i)), "");
  }
  Post(*a_, "ckpt/.metadata");
  TickAll(2);
  ASSERT_EQ(a_->outcomes.size(), 1u);
  EXPECT_TRUE(a_->outcomes[0].status.ok()) << a_->outcomes[0].status.ToString();
}

TEST_F(SharedCommitTest, PostingNeedsAJoinedMember) {
  SharedNode& n = Open("n");
  EXPECT_EQ(n.commits->Post("latest").status().err(), ENOTCONN);
}

TEST_F(SharedCommitTest, AbandonWithdrawsThePendingRequests) {
  StartThree();
  b_->progress = {10, 5, 0};
  const std::string id = Post(*a_, "ckpt/.metadata");
  TickAll();
  std::vector<CommitOutcome> withdrawn = a_->commits->Abandon();
  ASSERT_EQ(withdrawn.size(), 1u);
  EXPECT_EQ(withdrawn[0].id, id);
  EXPECT_EQ(withdrawn[0].status.err(), ECANCELED);
  EXPECT_TRUE(Requests().empty());
  EXPECT_TRUE(a_->commits->Pending().empty());
}

TEST_F(SharedCommitTest, AFailedPostLeavesNothingBehind) {
  StartThree();
  a_->env.Inject(FaultInjectingEnv::Fault(Env::Op::kRename, ENOSPC).Named("request").Times(1));
  Result<std::string> id = a_->commits->Post("ckpt/.metadata");
  EXPECT_EQ(id.status().err(), ENOSPC);
  EXPECT_TRUE(Requests().empty());
  EXPECT_TRUE(a_->commits->Pending().empty());
}

// -o replicas: every member completes dead members' parts from the replicas it holds of them
// (core/replication/stand_in.h, with a real PartnerStore and real files).
class StandInCommitTest : public SharedCommitTest {
 protected:
  static constexpr const char* kRunB = "00000000000000b0";

  struct Partner {
    Partner(Env& env, int root_fd, int staging_fd)
        : staging_fd(staging_fd),
          writer(env, root_fd, staging_fd, store, policy::DefaultCommitMarkers()) {}
    ~Partner() { close(staging_fd); }
    replication::PartnerStore store{1 << 20};
    int staging_fd;
    replication::StandInWriter writer;
  };

  // Three members, each leaving its sight of requests and standing in for dead ones.
  void StartThreeStandingIn() {
    StartThree();
    const char* runs[] = {"00000000000000a0", kRunB, "00000000000000c0"};
    SharedNode* nodes[] = {a_, b_, c_};
    for (int i = 0; i < 3; ++i) {
      const std::string staging = backing_ / (".ckptfs/staging/" + nodes[i]->name);
      std::filesystem::create_directories(staging);
      auto p = std::make_unique<Partner>(env_, root_fd_,
                                         open(staging.c_str(), O_RDONLY | O_DIRECTORY));
      replication::StandInWriter* w = &p->writer;
      nodes[i]->commits->SetStandIn(
          runs[i], [w](const MemberId& dead, const std::optional<Sight>& sight) {
            if (!sight) return w->Complete({dead.node, ""}, std::nullopt);
            return w->Complete({dead.node, sight->run}, sight->sealed);
          });
      const std::string self = nodes[i]->name;
      DeadCommitterFns dead_committer;
      dead_committer.markers = [w, self](const std::vector<std::string>& live) {
        std::vector<DeadCommitterMarker> markers;
        for (replication::HeldDeadMarker& m : w->DeadMarkersToCommit(self, live)) {
          markers.push_back({m.owner.node, m.owner.run, m.seq, std::move(m.path)});
        }
        return markers;
      };
      dead_committer.publish = [w](const DeadCommitterMarker& m) {
        return w->PublishDeadMarker({{m.node, m.run}, m.seq, m.path});
      };
      nodes[i]->commits->SetDeadCommitter(std::move(dead_committer));
      partners_[nodes[i]->name] = std::move(p);
    }
  }
  // c (or `at`) holds b's version `seq` of `path` (with `renamed_from`: b's rename of that file
  // to the marker `path`).
  void HoldAtC(uint64_t seq, const std::string& path, const std::string& bytes,
               const std::string& at = "c", const std::string& renamed_from = "") {
    replication::PartnerStore& store = partners_[at]->store;
    ASSERT_EQ(store.Reserve(bytes.size()), replication::PartnerStore::Room::kReserved);
    replication::Replica r{{"b", kRunB}, path, seq, 1,
                           std::shared_ptr<char[]>(new char[bytes.size()]), bytes.size(),
                           0644, renamed_from};
    std::copy(bytes.begin(), bytes.end(), r.bytes.get());
    store.Keep(std::move(r));
  }
  // Ticks until a's commit is decided (at most 30 ticks).
  const CommitOutcome& Decided() {
    for (int i = 0; i < 30 && a_->outcomes.empty(); ++i) TickAll();
    EXPECT_EQ(a_->outcomes.size(), 1u);
    return a_->outcomes.at(0);
  }

  // Ticks until c judges b dead (at most `ticks` ticks).
  void UntilCJudgesBDead(int ticks = 60) {
    const MemberId b = b_->membership->self();
    auto judged = [&] {
      const Liveness l = c_->membership->Judge(b);
      return l == Liveness::kDead || l == Liveness::kLeft;
    };
    for (int i = 0; i < ticks && !judged(); ++i) TickAll();
    ASSERT_TRUE(judged());
  }
  // b, the committer, sealed its shard (seq 7) and then its marker (seq 9), both replicated to c
  // (and to a when `also_at_a`), and died before it published the marker.
  void HoldBsCheckpoint(bool also_at_a = false) {
    HoldAtC(7, "ckpt/__1_0.distcp", "b's shard");
    HoldAtC(9, "ckpt/.metadata", "b's marker");
    partners_["c"]->store.Covered({"b", kRunB}, 9);
    if (also_at_a) {
      HoldAtC(7, "ckpt/__1_0.distcp", "b's shard", "a");
      HoldAtC(9, "ckpt/.metadata", "b's marker", "a");
      partners_["a"]->store.Covered({"b", kRunB}, 9);
    }
  }
  // The requests posted for dead node b, by id.
  std::vector<std::string> RequestsForB() {
    std::vector<std::string> ids;
    for (const std::string& id : Requests()) {
      std::optional<std::string> text = ReadHostFile(SharedPath("commits/" + id + "/request"));
      if (!text) continue;
      nlohmann::json r = nlohmann::json::parse(*text, nullptr, false);
      if (r.contains("for") && r["for"]["node"] == "b" && r["for"]["run"] == kRunB &&
          r["for"]["seq"] == 9) {
        ids.push_back(id);
      }
    }
    return ids;
  }

  std::map<std::string, std::unique_ptr<Partner>> partners_;
};

TEST_F(StandInCommitTest, ADeadCommittersMarkerIsPublishedByItsPartnerOnceTheOthersDataIsDurable) {
  StartThreeStandingIn();
  HoldBsCheckpoint(/*also_at_a=*/true);
  a_->progress = {20, 10, 0};  // a's shard, sealed before b's marker, is not durable yet.
  b_->running = false;
  UntilCJudgesBDead();
  TickAll();
  const std::vector<std::string> ids = RequestsForB();
  ASSERT_EQ(ids.size(), 1u) << "one partner commits b's marker, not both";
  EXPECT_EQ(ids[0].rfind("c~", 0), 0u) << ids[0] << ": c follows b in the ring";
  TickAll(5);
  EXPECT_FALSE(HostExists(backing_ / "ckpt/.metadata")) << "ahead of a's data";

  a_->progress.durable_seq = 20;
  for (int i = 0; i < 10 && !HostExists(backing_ / "ckpt/.metadata"); ++i) TickAll();
  EXPECT_EQ(ReadHostFile(backing_ / "ckpt/.metadata").value_or("<missing>"), "b's marker");
  EXPECT_EQ(ReadHostFile(backing_ / "ckpt/__1_0.distcp").value_or("<missing>"), "b's shard");
  EXPECT_EQ(ReadHostFile(backing_ / (".ckptfs/stood-in/b." + std::string(kRunB))), "8 9\n")
      << "b's node, back, publishes neither again";
  EXPECT_EQ(partners_["c"]->store.Totals().completed_for_dead, 2u);
  EXPECT_EQ(partners_["a"]->store.Totals().completed_for_dead, 0u);
  TickAll(2);
  EXPECT_TRUE(RequestsForB().empty()) << "the request is removed once decided";
  EXPECT_TRUE(a_->outcomes.empty()) << "no outcome of a's own";
  EXPECT_TRUE(c_->outcomes.empty()) << "not the flusher's: c published it itself";
}

TEST_F(StandInCommitTest, ADeadCommittersRenamedMarkerIsPublishedByItsPartnerInTheRenamesPlace) {
  StartThreeStandingIn();
  // b wrote .metadata.tmp (seq 8) and renamed it to .metadata (seq 9), as DCP does.
  HoldAtC(7, "ckpt/__1_0.distcp", "b's shard");
  HoldAtC(8, "ckpt/.metadata.tmp", "b's marker");
  HoldAtC(9, "ckpt/.metadata", "b's marker", "c", "ckpt/.metadata.tmp");
  partners_["c"]->store.Covered({"b", kRunB}, 9);
  a_->progress = {20, 10, 0};
  b_->running = false;
  UntilCJudgesBDead();
  TickAll();
  ASSERT_EQ(RequestsForB().size(), 1u) << "c commits b's rename to .metadata";
  TickAll(5);
  EXPECT_FALSE(HostExists(backing_ / "ckpt/.metadata")) << "ahead of a's data";
  a_->progress.durable_seq = 20;
  for (int i = 0; i < 10 && !HostExists(backing_ / "ckpt/.metadata"); ++i) TickAll();
  EXPECT_EQ(ReadHostFile(backing_ / "ckpt/.metadata").value_or("<missing>"), "b's marker");
  EXPECT_EQ(ReadHostFile(backing_ / "ckpt/__1_0.distcp").value_or("<missing>"), "b's shard");
  EXPECT_FALSE(HostExists(backing_ / "ckpt/.metadata.tmp")) << "renamed away";
  EXPECT_EQ(ReadHostFile(backing_ / (".ckptfs/stood-in/b." + std::string(kRunB))), "8 9\n");
  EXPECT_EQ(partners_["c"]->store.Totals().completed_for_dead, 3u);
}

TEST_F(StandInCommitTest, ThePartnersOwnDataSealedBeforeItCommitsADeadCommittersMarkerIsDurableFirst) {
  StartThreeStandingIn();
  HoldBsCheckpoint();
  c_->progress = {30, 10, 0};
  b_->running = false;
  UntilCJudgesBDead();
  TickAll(5);
  ASSERT_EQ(RequestsForB().size(), 1u);
  EXPECT_FALSE(HostExists(backing_ / "ckpt/.metadata")) << "ahead of c's own data";
  EXPECT_EQ(c_->commits->acks_owed(), 1u) << "c flushes now, whatever its flush delay";
  c_->progress.durable_seq = 30;
  for (int i = 0; i < 10 && !HostExists(backing_ / "ckpt/.metadata"); ++i) TickAll();
  EXPECT_EQ(ReadHostFile(backing_ / "ckpt/.metadata").value_or("<missing>"), "b's marker");
  EXPECT_EQ(c_->commits->acks_owed(), 0u);
}

TEST_F(StandInCommitTest, ADeadCommittersMarkerIsNeverPublishedWhenAnotherMemberDiesBeforeItsAck) {
  StartThreeStandingIn();
  HoldBsCheckpoint();
  a_->progress = {20, 10, 0};
  b_->running = false;
  UntilCJudgesBDead();
  TickAll();
  ASSERT_EQ(RequestsForB().size(), 1u);
  a_->running = false;  // Nothing of a's is replicated at c: its part cannot be completed.
  TickAll(60);
  EXPECT_FALSE(HostExists(backing_ / "ckpt/.metadata"));
  EXPECT_FALSE(HostExists(backing_ / "ckpt/__1_0.distcp"))
      << "b's data is written for a marker that commits, or for a commit that needs it";
  EXPECT_TRUE(RequestsForB().empty()) << "decided (failed) and removed";
  TickAll(5);
  EXPECT_TRUE(RequestsForB().empty()) << "a failed marker is not committed again";
}

TEST_F(StandInCommitTest, ADeadCommittersMarkerAfterDataItNeverReplicatedIsNeverCommitted) {
  StartThreeStandingIn();
  HoldAtC(7, "ckpt/__1_0.distcp", "b's shard");
  HoldAtC(9, "ckpt/.metadata", "b's marker");
  partners_["c"]->store.Covered({"b", kRunB}, 7);  // b's seq 8 is neither held nor durable.
  b_->running = false;
  UntilCJudgesBDead();
  TickAll(30);
  EXPECT_TRUE(RequestsForB().empty());
  EXPECT_FALSE(HostExists(backing_ / "ckpt/.metadata"));
}

TEST_F(StandInCommitTest, AMemberThatDiesAfterSeeingTheRequestIsCompletedByItsPartner) {
  StartThreeStandingIn();
  HoldAtC(7, "ckpt/__1_0.distcp", "b's shard");
  HoldAtC(9, "ckpt/.metadata", "b's own marker");
  partners_["c"]->store.Covered({"b", kRunB}, 10);
  b_->progress = {10, 5, 0};
  Post(*a_, "ckpt/.metadata");
  TickAll();  // b leaves its sight (its sealed point 10), c acknowledges.
  b_->running = false;
  const CommitOutcome& o = Decided();
  EXPECT_TRUE(o.status.ok()) << o.status.ToString();
  EXPECT_EQ(ReadHostFile(backing_ / "ckpt/__1_0.distcp").value_or("<missing>"), "b's shard");
  EXPECT_FALSE(HostExists(backing_ / "ckpt/.metadata")) << "b's own marker is never written";
  EXPECT_EQ(partners_["c"]->store.Totals().completed_for_dead, 1u);
  EXPECT_EQ(partners_["a"]->store.Totals().completed_for_dead, 0u);
  EXPECT_TRUE(Requests().empty());
}

TEST_F(StandInCommitTest, ACommitStillFailsWhenTheDeadMemberHadNotReplicatedWhatItNeeds) {
  StartThreeStandingIn();
  HoldAtC(7, "ckpt/__1_0.distcp", "b's shard");
  partners_["c"]->store.Covered({"b", kRunB}, 8);  // b had sealed up to 10.
  b_->progress = {10, 5, 0};
  Post(*a_, "ckpt/.metadata");
  TickAll();
  b_->running = false;
  const CommitOutcome& o = Decided();
  EXPECT_EQ(o.status.err(), EHOSTDOWN);
  EXPECT_NE(o.status.message().find("member b "), std::string::npos) << o.status.message();
  EXPECT_FALSE(HostExists(backing_ / "ckpt/__1_0.distcp"));
  EXPECT_EQ(partners_["c"]->store.Totals().completed_for_dead, 0u);
}

TEST_F(StandInCommitTest, AMemberThatDiedBeforeItSawTheRequestFailsTheCommit) {
  StartThreeStandingIn();
  HoldAtC(7, "ckpt/__1_0.distcp", "b's shard");
  partners_["c"]->store.Covered({"b", kRunB}, 100);
  b_->running = false;  // It never sees the request: what the commit needs of it is unknown.
  Post(*a_, "ckpt/.metadata");
  const CommitOutcome& o = Decided();
  EXPECT_EQ(o.status.err(), EHOSTDOWN);
  EXPECT_FALSE(HostExists(backing_ / "ckpt/__1_0.distcp"));
}

TEST_F(StandInCommitTest, CommitsGoOnWhileAStandInWritesAndItsAckWaitsUntilTheFilesAreDurable) {
  StartThreeStandingIn();
  HoldAtC(7, "ckpt/__1_0.distcp", "b's shard");
  partners_["c"]->store.Covered({"b", kRunB}, 10);
  b_->progress = {10, 5, 0};
  // c's stand-in stops mid-write until the test lets it go; a thread of the test steps c's
  // stand-ins, as the mount's stand-in thread does.
  std::mutex mu;
  std::condition_variable cv;
  bool writing = false, let_go = false, stepped = false;
  const std::thread::id ticking = std::this_thread::get_id();
  replication::StandInWriter* w = &partners_["c"]->writer;
  c_->steps_stand_ins = false;
  c_->commits->SetStandIn("00000000000000c0", [&, w](const MemberId& dead,
                                                     const std::optional<Sight>& sight) {
    if (std::this_thread::get_id() == ticking) {
      ADD_FAILURE() << "the stand-in ran inside a tick, holding back the beat and the commits";
      return Status::Error(EAGAIN, "not on the ticking thread");
    }
    {
      std::unique_lock lock(mu);
      writing = true;
      cv.notify_all();
      cv.wait(lock, [&] { return let_go; });
    }
    if (!sight) return w->Complete({dead.node, ""}, std::nullopt);
    return w->Complete({dead.node, sight->run}, sight->sealed);
  });
  const std::string id = Post(*a_, "ckpt/.metadata");
  TickAll();  // b leaves its sight (its sealed point 10).
  b_->running = false;
  // The tick in which c judges b dead queues b's part.
  ASSERT_NO_FATAL_FAILURE(UntilCJudgesBDead(30));
  std::thread stepper([&] {
    (void)c_->commits->StandInStep();
    std::lock_guard lock(mu);
    stepped = true;
    cv.notify_all();
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return writing || stepped; });
  }
  EXPECT_TRUE(writing) << "c queued no stand-in for b";

  // While it writes, c posts a commit of its own and every member ticks (c beats, acknowledges).
  Result<std::string> other = c_->commits->Post("other/.metadata");
  EXPECT_TRUE(other.ok()) << other.status().ToString();
  TickAll(2);
  EXPECT_TRUE(a_->outcomes.empty()) << "b's part is acknowledged before its files are durable";
  EXPECT_FALSE(HostExists(SharedPath("commits/" + id + "/ack.b")));
  EXPECT_FALSE(HostExists(backing_ / "ckpt/__1_0.distcp"));

  {
    std::lock_guard lock(mu);
    let_go = true;
    cv.notify_all();
  }
  stepper.join();
  EXPECT_EQ(ReadHostFile(backing_ / "ckpt/__1_0.distcp").value_or("<missing>"), "b's shard");
  const CommitOutcome& o = Decided();
  EXPECT_TRUE(o.status.ok()) << o.status.ToString();
  EXPECT_EQ(o.id, id);
}

}  // namespace
}  // namespace ckptfs
