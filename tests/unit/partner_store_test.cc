// The partner store (core/replication/partner_store.h): bounded, refuses rather than waits, and
// drops an owner's replicas once they are durable.
#include "core/replication/partner_store.h"

#include <gtest/gtest.h>

#include <cstring>

namespace ckptfs::replication {
namespace {

constexpr const char* kRun = "0123456789abcdef";

Replica Make(const std::string& owner, uint64_t seq, const std::string& bytes) {
  Replica r{{owner, kRun}, "dir/file" + std::to_string(seq), seq, 1,
            std::shared_ptr<char[]>(new char[bytes.size() + 1]), bytes.size()};
  std::memcpy(r.bytes.get(), bytes.data(), bytes.size());
  return r;
}

TEST(PartnerStoreTest, AReplicaIsHeldUntilItsOwnerReportsItDurable) {
  PartnerStore store(100);
  ASSERT_EQ(store.Reserve(5), PartnerStore::Room::kReserved);
  store.Keep(Make("n0", 3, "hello"));
  ASSERT_EQ(store.Reserve(3), PartnerStore::Room::kReserved);
  store.Keep(Make("n0", 4, "abc"));
  ASSERT_EQ(store.Reserve(2), PartnerStore::Room::kReserved);
  store.Keep(Make("n1", 3, "xy"));
  EXPECT_EQ(store.Bytes({"n0", kRun}, 3), "hello");
  EXPECT_EQ(store.Totals().bytes, 10u);
  EXPECT_EQ(store.Totals().replicas, 3u);

  EXPECT_EQ(store.DropDurable({"n0", kRun}, 3), 1u);
  EXPECT_EQ(store.Bytes({"n0", kRun}, 3), "");
  EXPECT_EQ(store.Bytes({"n0", kRun}, 4), "abc");
  EXPECT_EQ(store.Bytes({"n1", kRun}, 3), "xy");  // Another owner's seq 3 stays.
  EXPECT_EQ(store.Totals().bytes, 5u);
  EXPECT_EQ(store.DropDurable({"n0", kRun}, 100), 1u);
  EXPECT_EQ(store.DropDurable({"n2", kRun}, 100), 0u);
  EXPECT_EQ(store.Totals().replicas, 1u);
  EXPECT_EQ(store.Totals().dropped, 2u);
  EXPECT_EQ(store.ByOwner().size(), 1u);
}

TEST(PartnerStoreTest, AFullStoreRefusesUntilRoomIsFreedAndATooLargeReplicaIsRefusedForGood) {
  PartnerStore store(10);
  EXPECT_EQ(store.Reserve(11), PartnerStore::Room::kTooLarge);
  ASSERT_EQ(store.Reserve(8), PartnerStore::Room::kReserved);
  store.Keep(Make("n0", 1, "12345678"));
  EXPECT_EQ(store.Reserve(3), PartnerStore::Room::kFull);
  EXPECT_EQ(store.Totals().refused_full, 1u);
  store.DropDurable({"n0", kRun}, 1);
  EXPECT_EQ(store.Reserve(3), PartnerStore::Room::kReserved);
  store.Unreserve(3);
  EXPECT_EQ(store.Totals().bytes, 0u);
}

TEST(PartnerStoreTest, AReplicaSentAgainReplacesTheOneHeld) {
  PartnerStore store(100);
  ASSERT_EQ(store.Reserve(5), PartnerStore::Room::kReserved);
  store.Keep(Make("n0", 1, "first"));
  ASSERT_EQ(store.Reserve(6), PartnerStore::Room::kReserved);
  store.Keep(Make("n0", 1, "second"));
  EXPECT_EQ(store.Bytes({"n0", kRun}, 1), "second");
  EXPECT_EQ(store.Totals().bytes, 6u);
  EXPECT_EQ(store.Totals().replicas, 1u);
}

TEST(PartnerStoreTest, ARestartedOwnersVersionsAreKeptApartFromItsEarlierRuns) {
  PartnerStore store(100);
  const OwnerRun before{"n0", kRun}, after{"n0", "fedcba9876543210"};
  ASSERT_EQ(store.Reserve(3), PartnerStore::Room::kReserved);
  store.Keep(Make("n0", 1, "old"));
  Replica again = Make("n0", 1, "new!");
  again.owner = after;
  ASSERT_EQ(store.Reserve(4), PartnerStore::Room::kReserved);
  store.Keep(std::move(again));
  EXPECT_EQ(store.Bytes(before, 1), "old");
  EXPECT_EQ(store.Bytes(after, 1), "new!");
  // The new run's durable point drops nothing of the earlier run.
  EXPECT_EQ(store.DropDurable(after, 5), 1u);
  EXPECT_EQ(store.Bytes(before, 1), "old");
  EXPECT_EQ(store.ByOwner().at("n0"), std::make_pair(uint64_t{1}, uint64_t{3}));
}

TEST(PartnerStoreTest, WhatAnOwnerCoversOnlyRisesAndOutlivesItsReplicas) {
  PartnerStore store(100);
  const OwnerRun n0{"n0", kRun};
  EXPECT_EQ(store.CoveredOf(n0), std::nullopt);
  store.Covered(n0, 7);
  store.Covered(n0, 3);
  EXPECT_EQ(store.CoveredOf(n0), 7u);
  // Everything durable: the covered point stays for a stand-in.
  for (uint64_t seq : {2, 5, 9}) {
    ASSERT_EQ(store.Reserve(1), PartnerStore::Room::kReserved);
    store.Keep(Make("n0", seq, "x"));
  }
  std::vector<uint64_t> seqs;
  for (const Replica& r : store.Through(n0, 5)) seqs.push_back(r.seq);
  EXPECT_EQ(seqs, (std::vector<uint64_t>{2, 5}));
  EXPECT_EQ(store.DropDurable(n0, 100), 3u);
  EXPECT_EQ(store.CoveredOf(n0), 7u);
  EXPECT_EQ(store.CoveredOf({"n0", "fedcba9876543210"}), std::nullopt);
  EXPECT_EQ(store.Totals().bytes, 0u);
  EXPECT_TRUE(store.ByOwner().empty());
}

}  // namespace
}  // namespace ckptfs::replication
