// The memory a partner receives replicas into (core/replication/replica_memory.h): real mappings.
#include "core/replication/replica_memory.h"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <vector>

#include "core/replication/replication_policy.h"

namespace ckptfs::replication {
namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;

TEST(ReplicaMemoryTest, ADroppedReplicasMemoryReceivesTheNextOneOfAboutItsSize) {
  ReplicaMemory memory(64 * kMiB);
  std::shared_ptr<char[]> first = memory.Take(8 * kMiB);
  ASSERT_NE(first, nullptr);
  std::memset(first.get(), 'a', 8 * kMiB);
  char* const at = first.get();
  first.reset();
  std::shared_ptr<char[]> second = memory.Take(8 * kMiB - 4096);
  EXPECT_EQ(second.get(), at);
  EXPECT_EQ(memory.mapped_bytes(), 8 * kMiB);
}

TEST(ReplicaMemoryTest, KeptMemoryMuchLargerThanAReplicaIsNotUsedForIt) {
  ReplicaMemory memory(64 * kMiB);
  std::shared_ptr<char[]> large = memory.Take(16 * kMiB);
  char* const at = large.get();
  large.reset();
  std::shared_ptr<char[]> small = memory.Take(4 * kMiB);
  ASSERT_NE(small, nullptr);
  EXPECT_NE(small.get(), at);
  std::memset(small.get(), 'b', 4 * kMiB);
}

TEST(ReplicaMemoryTest, KeptMemoryIsUnmappedToStayWithinTheLimit) {
  ReplicaMemory memory(24 * kMiB);
  memory.Take(16 * kMiB).reset();  // Kept.
  EXPECT_EQ(memory.mapped_bytes(), 16 * kMiB);
  std::shared_ptr<char[]> other = memory.Take(12 * kMiB);  // The 16 are let go of for it.
  ASSERT_NE(other, nullptr);
  EXPECT_EQ(memory.mapped_bytes(), 12 * kMiB);
}

TEST(ReplicaMemoryTest, ReplicasInUseMayNeedMoreThanTheLimitAndGiveItBackWhenDropped) {
  ReplicaMemory memory(16 * kMiB);
  std::shared_ptr<char[]> a = memory.Take(10 * kMiB);
  std::shared_ptr<char[]> b = memory.Take(10 * kMiB);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(memory.mapped_bytes(), 20 * kMiB);
  a.reset();  // Over the limit: unmapped.
  EXPECT_EQ(memory.mapped_bytes(), 10 * kMiB);
  b.reset();  // Kept.
  EXPECT_EQ(memory.mapped_bytes(), 10 * kMiB);
}

TEST(ReplicaMemoryTest, SmallReplicasAreNotKept) {
  ReplicaMemory memory(16 * kMiB);
  std::shared_ptr<char[]> empty = memory.Take(0);
  std::shared_ptr<char[]> small = memory.Take(policy::kKeptReplicaBytes - 1);
  ASSERT_NE(empty, nullptr);
  ASSERT_NE(small, nullptr);
  std::memset(small.get(), 'c', policy::kKeptReplicaBytes - 1);
  EXPECT_EQ(memory.mapped_bytes(), 0u);
}

TEST(ReplicaMemoryTest, AReplicaMayOutliveItsMemoryAndBeDroppedOnAnotherThread) {
  std::shared_ptr<char[]> replica;
  {
    ReplicaMemory memory(16 * kMiB);
    replica = memory.Take(2 * kMiB);
  }
  ASSERT_NE(replica, nullptr);
  std::memset(replica.get(), 'd', 2 * kMiB);
  std::thread([r = std::move(replica)]() mutable { r.reset(); }).join();
}

TEST(ReplicaMemoryTest, ThreadsTakeAndDropReplicasAtOnce) {
  ReplicaMemory memory(32 * kMiB);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&memory, t] {
      for (int i = 0; i < 50; ++i) {
        std::shared_ptr<char[]> r = memory.Take((2 + t) * kMiB);
        ASSERT_NE(r, nullptr);
        r[0] = static_cast<char>(i);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_LE(memory.mapped_bytes(), 32 * kMiB);
}

}  // namespace
}  // namespace ckptfs::replication
