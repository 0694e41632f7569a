// The shared area of -o shared on the object store (core/shared/shared_store.h) against a real S3
// server, moto's server mode (tests/unit/moto_server.h): its objects, and the membership and
// commit protocol run over it by three members that share nothing but the bucket.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "core/base/clock.h"
#include "core/remote/s3_client.h"
#include "core/shared/membership.h"
#include "core/shared/shared_commit.h"
#include "core/shared/shared_store.h"
#include "moto_server.h"

namespace ckptfs {
namespace {

using testing_util::MotoServer;

constexpr std::chrono::milliseconds kMemberTimeout{10000};
constexpr std::chrono::milliseconds kTickStep{1000};

// One node: its own client of the bucket, its journal progress (set by the test).
struct StoreNode {
  std::string name;
  FlushProgress progress;
  std::unique_ptr<SharedStore> area;
  std::unique_ptr<Membership> membership;
  std::unique_ptr<SharedCommits> commits;
  bool running = true;
  std::vector<CommitOutcome> outcomes;
};

class SharedStoreTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new MotoServer(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }

  void SetUp() override {
    ASSERT_TRUE(server_->ready()) << "moto_server (" CKPTFS_MOTO_SERVER ") does not listen";
    bucket_ = "shared-" + std::to_string(++buckets_);
    ASSERT_TRUE(server_->CreateBucket(bucket_));
    settings_ = S3Settings{{bucket_, "run/a"}, server_->endpoint(), "us-east-1",
                           {"test-key", "test-secret", "", "the test"}};
    Result<std::unique_ptr<S3Client>> client = S3Client::Make(settings_);
    ASSERT_TRUE(client.ok());
    client_ = std::move(*client);
  }

  std::unique_ptr<SharedStore> Area() {
    Result<std::unique_ptr<SharedStore>> area = SharedStore::Make(settings_);
    EXPECT_TRUE(area.ok()) << area.status().ToString();
    return area.ok() ? std::move(*area) : nullptr;
  }

  // A joined member named `name`.
  StoreNode& Start(const std::string& name) {
    auto node = std::make_unique<StoreNode>();
    StoreNode* n = node.get();
    n->name = name;
    n->area = Area();
    ProgressFn progress = [n] { return n->progress; };
    Result<std::unique_ptr<Membership>> m =
        Membership::Open(*n->area, {name, kMemberTimeout, ""}, clock_, progress);
    EXPECT_TRUE(m.ok()) << m.status().ToString();
    n->membership = std::move(*m);
    n->commits = SharedCommits::Open(*n->area, *n->membership, clock_, kMemberTimeout, progress);
    Status joined = n->membership->Join();
    EXPECT_TRUE(joined.ok()) << joined.ToString();
    nodes_.push_back(std::move(node));
    return *n;
  }

  void TickAll(int times = 1) {
    for (int i = 0; i < times; ++i) {
      clock_.Advance(kTickStep);
      for (auto& n : nodes_) {
        if (!n->running) continue;
        (void)n->membership->Tick();
        for (CommitOutcome& o : n->commits->Tick()) n->outcomes.push_back(std::move(o));
      }
    }
  }

  // The keys of every object under the area.
  std::vector<std::string> AreaKeys() {
    std::vector<std::string> keys;
    std::vector<std::string> prefixes = {"run/a/.ckptfs/shared/"};
    while (!prefixes.empty()) {
      const std::string p = prefixes.back();
      prefixes.pop_back();
      Result<S3Client::ListPage> page = client_->ListObjects(p, "", 1000, nullptr);
      EXPECT_TRUE(page.ok()) << page.status().ToString();
      if (!page.ok()) break;
      for (const auto& o : page->objects) keys.push_back(o.key);
      for (const auto& sub : page->prefixes) prefixes.push_back(sub);
    }
    std::sort(keys.begin(), keys.end());
    return keys;
  }

  static inline MotoServer* server_ = nullptr;
  static inline int buckets_ = 0;
  std::string bucket_;
  S3Settings settings_;
  std::unique_ptr<S3Client> client_;
  ManualClock clock_;
  std::vector<std::unique_ptr<StoreNode>> nodes_;
};

TEST_F(SharedStoreTest, AReplacedObjectIsReadBackAndListedUnderTheSharedPrefix) {
  std::unique_ptr<SharedStore> area = Area();
  EXPECT_EQ(area->root(), "run/a/.ckptfs/shared/");
  ASSERT_TRUE(area->Replace("members", "n0", ".n0.tmp", "first").ok());
  ASSERT_TRUE(area->Replace("members", "n0", ".n0.tmp", "second").ok());
  ASSERT_TRUE(area->Replace("members", "n1", ".n1.tmp", "other").ok());
  Result<std::string> got = area->Read("members", "n0", 100);
  ASSERT_TRUE(got.ok()) << got.status().ToString();
  EXPECT_EQ(*got, "second");
  Result<std::vector<std::string>> names = area->List("members");
  ASSERT_TRUE(names.ok()) << names.status().ToString();
  std::sort(names->begin(), names->end());
  EXPECT_EQ(*names, (std::vector<std::string>{"n0", "n1"}));
  EXPECT_EQ(AreaKeys(), (std::vector<std::string>{"run/a/.ckptfs/shared/members/n0",
                                                  "run/a/.ckptfs/shared/members/n1"}));
}

TEST_F(SharedStoreTest, ReadsAreBoundedAndMissingObjectsSayENOENT) {
  std::unique_ptr<SharedStore> area = Area();
  EXPECT_EQ(area->Read("members", "nobody", 100).status().err(), ENOENT);
  ASSERT_TRUE(area->Replace("members", "big", ".big.tmp", std::string(5000, 'x')).ok());
  EXPECT_EQ(area->Read("members", "big", 4096).status().err(), EFBIG);
  EXPECT_EQ(area->Read("members", "../x", 100).status().err(), EINVAL);
  EXPECT_EQ(area->Replace("members/../..", "x", ".x.tmp", "y").err(), EINVAL);
  EXPECT_EQ(area->List("a/b/c").status().err(), EINVAL);
}

TEST_F(SharedStoreTest, CommitDirectoriesAreListedByNameAndRemovedWithTheirObjects) {
  std::unique_ptr<SharedStore> area = Area();
  ASSERT_TRUE(area->MakeDir("commits/n0~0123456789abcdef~1").ok());
  ASSERT_TRUE(area->Replace("commits/n0~0123456789abcdef~1", "request", ".request.tmp", "{}").ok());
  ASSERT_TRUE(area->Replace("commits/n0~0123456789abcdef~1", "ack.n1", ".a.tmp", "{}").ok());
  ASSERT_TRUE(area->Replace("commits/n0~0123456789abcdef~2", "request", ".request.tmp", "{}").ok());
  Result<std::vector<std::string>> ids = area->List("commits");
  ASSERT_TRUE(ids.ok()) << ids.status().ToString();
  std::sort(ids->begin(), ids->end());
  EXPECT_EQ(*ids, (std::vector<std::string>{"n0~0123456789abcdef~1", "n0~0123456789abcdef~2"}));
  ASSERT_TRUE(area->RemoveDir("commits/n0~0123456789abcdef~1").ok());
  Result<std::vector<std::string>> left = area->List("commits/n0~0123456789abcdef~1");
  ASSERT_TRUE(left.ok());
  EXPECT_TRUE(left->empty());
  EXPECT_EQ(AreaKeys(),
            (std::vector<std::string>{"run/a/.ckptfs/shared/commits/n0~0123456789abcdef~2/request"}));
}

TEST_F(SharedStoreTest, AnUnreachableStoreFailsARequestAfterAFewRetriesInsteadOfHanging) {
  S3Settings down = settings_;
  down.endpoint = "http://127.0.0.1:" + std::to_string(testing_util::FreeLoopbackPort());
  Result<std::unique_ptr<SharedStore>> area = SharedStore::Make(down);
  ASSERT_TRUE(area.ok());
  EXPECT_FALSE((*area)->Replace("members", "n0", ".n0.tmp", "x").ok());
  EXPECT_FALSE((*area)->List("members").ok());
}

TEST_F(SharedStoreTest, AMarkerCommitsOverTheStoreOnlyOnceEveryOtherMemberIsDurable) {
  StoreNode& n0 = Start("n0");
  StoreNode& n1 = Start("n1");
  StoreNode& n2 = Start("n2");
  n1.progress = {5, 3, 100};
  n2.progress = {7, 7, 0};
  TickAll(2);
  Result<std::string> id = n0.commits->Post("ckpt/.metadata");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  TickAll(3);
  EXPECT_TRUE(n0.outcomes.empty()) << "committed while n1 had sealed data not durable";
  n1.progress.sealed_seq = 9;  // Sealed after the request was seen: not waited for.
  n1.progress.durable_seq = 5;
  TickAll(2);
  ASSERT_EQ(n0.outcomes.size(), 1u);
  EXPECT_TRUE(n0.outcomes[0].status.ok()) << n0.outcomes[0].status.ToString();
  TickAll(1);
  for (const std::string& key : AreaKeys()) {
    EXPECT_EQ(key.find("/commits/"), std::string::npos) << key << " left after the commit";
  }
}

TEST_F(SharedStoreTest, AMemberThatStopsBeatingFailsTheCommitAndTheNextCommitSucceeds) {
  StoreNode& n0 = Start("n0");
  Start("n1");
  StoreNode& n2 = Start("n2");
  n2.progress = {4, 1, 10};
  TickAll(2);
  Result<std::string> id = n0.commits->Post("ckpt/.metadata");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  TickAll(1);
  n2.running = false;  // Killed with its data not on the store.
  for (int i = 0; i < 40 && n0.outcomes.empty(); ++i) TickAll(1);
  ASSERT_EQ(n0.outcomes.size(), 1u);
  EXPECT_EQ(n0.outcomes[0].status.err(), EHOSTDOWN) << n0.outcomes[0].status.ToString();
  Result<std::string> next = n0.commits->Post("ckpt2/.metadata");
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  for (int i = 0; i < 10 && n0.outcomes.size() < 2; ++i) TickAll(1);
  ASSERT_EQ(n0.outcomes.size(), 2u);
  EXPECT_TRUE(n0.outcomes[1].status.ok()) << n0.outcomes[1].status.ToString();
  // The dead member's object was removed by the first to judge it.
  for (const std::string& key : AreaKeys()) EXPECT_NE(key, "run/a/.ckptfs/shared/members/n2");
}

TEST_F(SharedStoreTest, AnAcknowledgementLeftAfterItsRequestWasRemovedIsRemovedByItsCommitter) {
  Start("n0");
  StoreNode& n1 = Start("n1");
  TickAll(1);
  // n0's ack landing after n1 removed its decided request: nothing on a store refuses it.
  const std::string id = "n1~" + n1.membership->self().incarnation + "~99";
  std::unique_ptr<SharedStore> area = Area();
  ASSERT_TRUE(area->Replace("commits/" + id, "ack.n0", ".a.tmp", "{}").ok());
  ASSERT_EQ(AreaKeys().size(), 3u);
  TickAll(1);
  for (const std::string& key : AreaKeys()) {
    EXPECT_EQ(key.find(id), std::string::npos) << key << " left";
  }
}

}  // namespace
}  // namespace ckptfs
