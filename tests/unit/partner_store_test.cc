// The partner store (core/replication/partner_store.h): bounded, refuses rather than waits, and
// drops an owner's replicas once they are durable.
#include "core/replication/partner_store.h"

#include <gtest/gtest.h>

#include <cstring>

namespace ckptfs::replication {
namespace {

Replica Make(const std::string& owner, uint64_t seq, const std::string& bytes) {
  Replica r{owner, "dir/file" + std::to_string(seq), seq, 1,
            std::unique_ptr<char[]>(new char[bytes.size() + 1]), bytes.size()};
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
  EXPECT_EQ(store.Bytes("n0", 3), "hello");
  EXPECT_EQ(store.Totals().bytes, 10u);
  EXPECT_EQ(store.Totals().replicas, 3u);

  EXPECT_EQ(store.DropDurable("n0", 3), 1u);
  EXPECT_EQ(store.Bytes("n0", 3), "");
  EXPECT_EQ(store.Bytes("n0", 4), "abc");
  EXPECT_EQ(store.Bytes("n1", 3), "xy");  // Another owner's seq 3 stays.
  EXPECT_EQ(store.Totals().bytes, 5u);
  EXPECT_EQ(store.DropDurable("n0", 100), 1u);
  EXPECT_EQ(store.DropDurable("n2", 100), 0u);
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
  store.DropDurable("n0", 1);
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
  EXPECT_EQ(store.Bytes("n0", 1), "second");
  EXPECT_EQ(store.Totals().bytes, 6u);
  EXPECT_EQ(store.Totals().replicas, 1u);
}

}  // namespace
}  // namespace ckptfs::replication
