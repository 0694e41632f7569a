// The Replicator (core/replication/replicator.h): endpoints parsed as untrusted text, partners
// chosen from the live members' endpoints, and the replicated level, over real TCP on loopback.
#include "core/replication/replicator.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "replication_fixture.h"

namespace ckptfs::replication {
namespace {

using namespace std::chrono_literals;

using testing_util::kRun;
using testing_util::Version;

GroupSecret Secret() { return *GroupSecret::FromBytes("the secret of the replicator test"); }

std::unique_ptr<Replicator> Start(const std::string& node, int replicas) {
  ReplicatorSettings s;
  s.node = node;
  s.replicas = replicas;
  s.bind_address = "127.0.0.1";
  s.store_bytes = 16 << 20;
  s.run = kRun;
  Result<std::unique_ptr<Replicator>> r = Replicator::Start(s, Secret());
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  return std::move(*r);
}

TEST(EndpointTest, EndpointsRoundTripAndHostileTextIsRefused) {
  std::string address;
  uint16_t port = 0;
  ASSERT_TRUE(ParseEndpoint(FormatEndpoint("10.251.3.1", 40000), &address, &port));
  EXPECT_EQ(address, "10.251.3.1");
  EXPECT_EQ(port, 40000);
  ASSERT_TRUE(ParseEndpoint(FormatEndpoint("fd00::1", 1), &address, &port));
  EXPECT_EQ(address, "fd00::1");
  EXPECT_EQ(FormatEndpoint("fd00::1", 1), "[fd00::1]:1");
  for (const char* bad : {"", ":80", "10.0.0.1", "10.0.0.1:", "10.0.0.1:0", "10.0.0.1:65536",
                          "10.0.0.1:80x", "host.example:80", "[fd00::1:80", "fd00::1]:80",
                          "10.0.0.1:-1", "10.0.0.1:+80", "10.0.0.1:123456"}) {
    EXPECT_FALSE(ParseEndpoint(bad, &address, &port)) << bad;
  }
  EXPECT_FALSE(ParseEndpoint(std::string(100, '1') + ":80", &address, &port));
}

TEST(ReplicatorTest, VersionsGoToTheNextMemberOfTheRingAndCountAsReplicatedOnceHeld) {
  std::unique_ptr<Replicator> n0 = Start("n0", 1);
  std::unique_ptr<Replicator> n1 = Start("n1", 1);
  std::unique_ptr<Replicator> n2 = Start("n2", 1);
  const std::vector<MemberEndpoint> live = {
      {"n0", n0->endpoint()}, {"n1", n1->endpoint()}, {"n2", n2->endpoint()}, {"n9", "bogus"}};
  n0->Sealed(Version(3, "before its partner was known"));
  n0->Fed(3);
  EXPECT_EQ(n0->replicated_seq(), 0u) << "no partner yet: nothing is replicated";
  for (auto* r : {n0.get(), n1.get(), n2.get()}) r->MembersChanged(live);
  ASSERT_TRUE(Eventually([&] { return n0->replicated_seq() == 3; }));
  EXPECT_EQ(n1->store().Bytes({"n0", kRun}, 3), "before its partner was known");
  EXPECT_EQ(n2->store().Totals().replicas, 0u);
  n0->Sealed(Version(5, "five"));
  n0->Fed(6);
  ASSERT_TRUE(Eventually([&] { return n0->replicated_seq() == 6; }));
  ReplicatorStatus s = n0->Status();
  ASSERT_EQ(s.partners.size(), 1u);
  EXPECT_EQ(s.partners[0].node, "n1");
  EXPECT_EQ(s.partners[0].link.replicas_stored, 2u);
  EXPECT_EQ(n1->Status().held_by_owner.at("n0"), std::make_pair(uint64_t{2}, uint64_t{32}));

  // n0 sees n1 no more: its partner becomes n2, which receives every version not durable yet,
  // and n1 (still running) is told to drop n0's replicas.
  n0->Durable(3);
  n0->MembersChanged({{"n0", n0->endpoint()}, {"n2", n2->endpoint()}});
  ASSERT_TRUE(Eventually([&] { return n2->store().Bytes({"n0", kRun}, 5) == "five"; }));
  EXPECT_EQ(n2->store().Bytes({"n0", kRun}, 3), "");
  ASSERT_TRUE(Eventually([&] { return n0->replicated_seq() == 6; }));
  ASSERT_TRUE(Eventually([&] { return n1->store().Totals().replicas == 0; }));
  EXPECT_EQ(n1->store().Totals().dropped, 2u);
  // At its end (an unmount, after the drain) n0 tells its partner the final durable point.
  n0->Sealed(Version(7, "seven"));
  n0->Fed(7);
  ASSERT_TRUE(Eventually([&] { return n2->store().Bytes({"n0", kRun}, 7) == "seven"; }));
  n0->Durable(7);
  n0->Stop();
  ASSERT_TRUE(Eventually([&] { return n2->store().Totals().replicas == 0; }));
}

TEST(ReplicatorTest, TwoReplicasNeedBothPartners) {
  std::unique_ptr<Replicator> a = Start("a", 2);
  std::unique_ptr<Replicator> b = Start("b", 1);
  a->MembersChanged({{"a", a->endpoint()}, {"b", b->endpoint()}});
  a->Sealed(Version(1, "x"));
  a->Fed(1);
  ASSERT_TRUE(Eventually([&] { return b->store().Totals().replicas == 1; }));
  EXPECT_EQ(a->replicated_seq(), 0u) << "one partner of two holds it";
  std::unique_ptr<Replicator> c = Start("c", 1);
  a->MembersChanged({{"a", a->endpoint()}, {"b", b->endpoint()}, {"c", c->endpoint()}});
  ASSERT_TRUE(Eventually([&] { return a->replicated_seq() == 1; }));
  EXPECT_EQ(c->store().Bytes({"a", kRun}, 1), "x");
}

TEST(ReplicatorTest, SupersededVersionsAreNeverSentAndLetGoOf) {
  std::unique_ptr<Replicator> a = Start("a", 1);
  auto superseded = std::make_shared<bool>(false);
  auto v1 = std::make_shared<Outgoing>(*Version(1, "old chunk"));
  v1->superseded = [superseded] { return *superseded; };
  std::weak_ptr<const Outgoing> held = v1;
  // No partner yet: the version waits in the replicator.
  a->Sealed(std::move(v1));
  a->Sealed(Version(2, "new chunk"));
  a->Fed(2);
  *superseded = true;
  a->DropSuperseded();
  EXPECT_TRUE(held.expired()) << "a superseded version's bytes stay pinned";
  std::unique_ptr<Replicator> b = Start("b", 1);
  a->MembersChanged({{"a", a->endpoint()}, {"b", b->endpoint()}});
  ASSERT_TRUE(Eventually([&] { return a->replicated_seq() == 2; }));
  EXPECT_EQ(b->store().Bytes({"a", kRun}, 2), "new chunk");
  EXPECT_EQ(b->store().Totals().replicas, 1u);
}

TEST(ReplicatorTest, AMemberNeverReplicatesToItselfNorToMembersWithoutAnEndpoint) {
  std::unique_ptr<Replicator> a = Start("a", 1);
  a->MembersChanged({{"a", a->endpoint()}, {"b", ""}, {"c", "not an endpoint"}});
  EXPECT_TRUE(a->Status().partners.empty());
}

}  // namespace
}  // namespace ckptfs::replication
