// Tests of Arena: reservations, block reuse, the capacity bound and back-pressure.
#include "core/memory/arena.h"
#include "core/recovery/cache_memory_layout.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "eventually.h"

namespace ckptfs {
namespace {

using namespace std::chrono_literals;

TEST(ArenaTest, CapacityIsRoundedDownToBlocksAndAtLeastOne) {
  EXPECT_EQ(Arena(10 * kBlockSize + 100).capacity_blocks(), 10u);
  EXPECT_EQ(Arena(100).capacity_blocks(), 1u);
}

TEST(ArenaTest, ReservationCountsAsUsedUntilReleased) {
  Arena arena(8 * kBlockSize);
  EXPECT_EQ(arena.used_blocks(), 0u);
  {
    Reservation r = arena.Reserve(3);
    EXPECT_EQ(r.count(), 3u);
    EXPECT_EQ(arena.used_blocks(), 3u);
    BlockRef b = r.Take();
    EXPECT_EQ(r.count(), 2u);
    EXPECT_EQ(arena.used_blocks(), 3u);  // 2 reserved + 1 held.
    r = Reservation();                   // Unused reserved blocks go back.
    EXPECT_EQ(arena.used_blocks(), 1u);
  }
  EXPECT_EQ(arena.used_blocks(), 0u);
}

TEST(ArenaTest, MovedReservationReleasesOnce) {
  Arena arena(8 * kBlockSize);
  Reservation a = arena.Reserve(4);
  Reservation b = std::move(a);
  EXPECT_EQ(a.count(), 0u);
  EXPECT_EQ(b.count(), 4u);
  Reservation c = arena.Reserve(2);
  c = std::move(b);  // c's own 2 are released, b's 4 move over.
  EXPECT_EQ(arena.used_blocks(), 4u);
  c = Reservation();
  EXPECT_EQ(arena.used_blocks(), 0u);
}

TEST(ArenaTest, TryReserveFailsWhenFullAndSucceedsAfterFree) {
  Arena arena(4 * kBlockSize);
  Reservation all;
  ASSERT_TRUE(arena.TryReserve(4, &all, false));
  Reservation more;
  EXPECT_FALSE(arena.TryReserve(1, &more, false));
  EXPECT_EQ(more.count(), 0u);
  EXPECT_EQ(arena.used_blocks(), 4u);
  BlockRef held = all.Take();
  all = Reservation();
  EXPECT_TRUE(arena.TryReserve(3, &more, false));
  EXPECT_FALSE(arena.TryReserve(1, &all, false));
}

TEST(ArenaTest, SharedBlockReturnsWithLastReference) {
  Arena arena(4 * kBlockSize);
  Reservation r = arena.Reserve(1);
  BlockRef a = r.Take();
  EXPECT_FALSE(a.shared());
  {
    BlockRef b = a;
    EXPECT_TRUE(a.shared());
    EXPECT_TRUE(b.shared());
    EXPECT_EQ(a.data(), b.data());
  }
  EXPECT_FALSE(a.shared());
  EXPECT_EQ(arena.used_blocks(), 1u);
  a = BlockRef();
  EXPECT_EQ(arena.used_blocks(), 0u);
}

TEST(ArenaTest, BlocksAreReusedLifo) {
  Arena arena(16 * kBlockSize);
  Reservation r = arena.Reserve(3);
  BlockRef a = r.Take(), b = r.Take(), c = r.Take();
  char* pa = a.data();
  char* pb = b.data();
  char* pc = c.data();
  EXPECT_NE(pa, pb);
  EXPECT_NE(pb, pc);
  a = BlockRef();
  c = BlockRef();
  b = BlockRef();  // Freed in order a, c, b: handed out again as b, c, a.
  Reservation r2 = arena.Reserve(3);
  EXPECT_EQ(r2.Take().data(), pb);
  // The block just taken was dropped at once: it is the hottest again.
  BlockRef x = r2.Take();
  EXPECT_EQ(x.data(), pb);
  BlockRef y = r2.Take();
  EXPECT_EQ(y.data(), pc);
}

TEST(ArenaTest, MappedBlocksDoNotGrowWhenFreedBlocksAreReused) {
  // Large enough capacity that the first mapping (64 MiB) does not cover it: a second mapping
  // would be made if freed blocks were not reused.
  Arena arena(256ull << 20);
  const size_t n = (48ull << 20) / kBlockSize;  // 48 MiB: within the first mapping.
  std::vector<BlockRef> file;
  {
    Reservation r = arena.Reserve(n);
    for (size_t i = 0; i < n; ++i) file.push_back(r.Take());
  }
  size_t mapped = arena.mapped_blocks();
  EXPECT_GE(mapped, n);
  EXPECT_LT(mapped, 2 * n);
  for (int round = 0; round < 5; ++round) {
    file.clear();  // The file is deleted...
    Reservation r = arena.Reserve(n);
    for (size_t i = 0; i < n; ++i) file.push_back(r.Take());  // ...and written again.
    EXPECT_EQ(arena.mapped_blocks(), mapped) << "round " << round;
  }
  std::set<char*> distinct;
  for (const BlockRef& b : file) distinct.insert(b.data());
  EXPECT_EQ(distinct.size(), n);
}

// A mounted cache of many GiB costs header memory only for the slabs its files have used.
TEST(ArenaTest, BlocksNeverUsedHaveNoHeaderAndAreHandedOutInAscendingOrder) {
  Arena arena(256ull << 20);
  arena.Prefault([] { return false; });
  EXPECT_EQ(arena.blocks_with_headers(), 0u);
  Reservation r = arena.Reserve(3);
  BlockRef a = r.Take(), b = r.Take(), c = r.Take();
  EXPECT_EQ(a.slot(), 0u);
  EXPECT_EQ(b.slot(), 1u);
  EXPECT_EQ(c.slot(), 2u);
  EXPECT_EQ(b.data(), a.data() + kBlockSize);
  EXPECT_EQ(c.data(), b.data() + kBlockSize);
  EXPECT_EQ(arena.blocks_with_headers(), (64ull << 20) / kBlockSize);
  arena.StopBackground();
}

TEST(ArenaTest, BlocksAreWritableAndDistinct) {
  Arena arena(8 * kBlockSize);
  Reservation r = arena.Reserve(8);
  std::vector<BlockRef> blocks;
  for (int i = 0; i < 8; ++i) {
    blocks.push_back(r.Take());
    memset(blocks.back().data(), i + 1, kBlockSize);
  }
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(blocks[i].data()[0], i + 1);
    EXPECT_EQ(blocks[i].data()[kBlockSize - 1], i + 1);
  }
}

TEST(ArenaTest, UsedNeverExceedsCapacityUnderConcurrency) {
  const size_t cap = 32;
  Arena arena(cap * kBlockSize);
  std::atomic<bool> stop{false};
  std::atomic<size_t> max_seen{0};
  std::thread monitor([&] {
    while (!stop.load()) {
      size_t u = arena.used_blocks();
      size_t m = max_seen.load();
      while (u > m && !max_seen.compare_exchange_weak(m, u)) {
      }
    }
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < 4; ++t) {
    workers.emplace_back([&, t] {
      std::mt19937 rng(t);
      for (int i = 0; i < 2000; ++i) {
        size_t want = 1 + rng() % 12;
        Reservation r = arena.Reserve(want);
        std::vector<BlockRef> held;
        size_t take = rng() % (want + 1);
        for (size_t k = 0; k < take; ++k) held.push_back(r.Take());
        if (arena.used_blocks() > cap) max_seen = cap + 1000;
      }
    });
  }
  for (auto& w : workers) w.join();
  stop = true;
  monitor.join();
  EXPECT_LE(max_seen.load(), cap);
  EXPECT_LE(arena.mapped_blocks(), cap);
  EXPECT_EQ(arena.used_blocks(), 0u);
}

TEST(ArenaTest, WriterBlocksUntilAnotherThreadFreesBlocks) {
  Arena arena(4 * kBlockSize);
  std::vector<BlockRef> held;
  {
    Reservation r = arena.Reserve(4);
    for (int i = 0; i < 4; ++i) held.push_back(r.Take());
  }
  std::atomic<bool> returned{false};
  auto writer = std::async(std::launch::async, [&] {
    Reservation r = arena.Reserve(2);
    returned = true;
    return r.count();
  });
  ASSERT_TRUE(Eventually([&] { return arena.waiting_writers() == 1; }));
  EXPECT_FALSE(returned.load());
  held.pop_back();  // One block is not enough for the writer.
  EXPECT_FALSE(returned.load());
  EXPECT_EQ(arena.used_blocks(), 3u);
  held.pop_back();
  ASSERT_EQ(writer.wait_for(20s), std::future_status::ready) << "writer never woke up";
  EXPECT_EQ(writer.get(), 2u);
  EXPECT_EQ(arena.waiting_writers(), 0u);
}

TEST(ArenaTest, ReclaimerIsAskedBeforeWaiting) {
  Arena arena(4 * kBlockSize);
  std::mutex mu;
  std::vector<BlockRef> clean;  // Blocks the reclaimer may drop.
  {
    Reservation r = arena.Reserve(4);
    for (int i = 0; i < 4; ++i) clean.push_back(r.Take());
  }
  std::atomic<int> calls{0};
  std::atomic<size_t> asked{0};
  std::atomic<int> pressure{0};
  arena.SetReclaimer([&](size_t wanted) {
    calls++;
    asked = wanted;
    std::lock_guard lock(mu);
    size_t freed = 0;
    while (freed < wanted && !clean.empty()) {
      clean.pop_back();
      ++freed;
    }
    return freed;
  });
  arena.SetPressureCallback([&] { pressure++; });
  Reservation r = arena.Reserve(3);
  EXPECT_EQ(r.count(), 3u);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_EQ(asked.load(), 3u);
  EXPECT_EQ(pressure.load(), 0) << "the flusher was hurried although reclaim sufficed";
  EXPECT_EQ(arena.waiting_writers(), 0u);
  EXPECT_EQ(clean.size(), 1u);

  // TryReserve without `reclaim` never calls it.
  Reservation none;
  EXPECT_FALSE(arena.TryReserve(1, &none, /*reclaim=*/false));
  EXPECT_EQ(calls.load(), 1);
  // With `reclaim`, it does.
  EXPECT_TRUE(arena.TryReserve(1, &none, /*reclaim=*/true));
  EXPECT_EQ(calls.load(), 2);
}

TEST(ArenaTest, PressureCallbackRunsWhenReclaimIsNotEnough) {
  Arena arena(4 * kBlockSize);
  std::mutex mu;
  std::vector<BlockRef> dirty;  // Only "the flusher" (the pressure callback) can free these.
  {
    Reservation r = arena.Reserve(4);
    for (int i = 0; i < 4; ++i) dirty.push_back(r.Take());
  }
  std::atomic<int> reclaims{0}, pressure{0};
  arena.SetReclaimer([&](size_t) {
    reclaims++;
    return size_t{0};
  });
  arena.SetPressureCallback([&] {
    pressure++;
    std::lock_guard lock(mu);
    dirty.clear();
  });
  auto writer = std::async(std::launch::async, [&] { return arena.Reserve(4).count(); });
  ASSERT_EQ(writer.wait_for(20s), std::future_status::ready);
  EXPECT_EQ(writer.get(), 4u);
  EXPECT_GE(pressure.load(), 1);
  EXPECT_GE(reclaims.load(), 1);
}

TEST(ArenaTest, AWaitForMemoryEndsWithEintrOnceTheWriterIsKilledAndReservesNothing) {
  Arena arena(4 * kBlockSize);
  Reservation all = arena.Reserve(4);
  std::atomic<bool> killed{false};
  auto writer = std::async(std::launch::async, [&] {
    return arena.Reserve(2, [&] { return killed.load(); }).status().err();
  });
  while (arena.waiting_writers() == 0) std::this_thread::sleep_for(1ms);
  killed = true;
  EXPECT_EQ(writer.get(), EINTR);
  EXPECT_EQ(arena.used_blocks(), 4u);
  EXPECT_EQ(arena.waiting_writers(), 0u);
}

// Prefault maps the whole capacity at once and faults it in behind the blocks' users, without
// touching what they have written.
TEST(ArenaTest, AnArenaInSharedMemoryLeavesItsBlocksToTheNext) {
  // Two slabs' worth, so that a block of the second slab is adopted before it was ever mapped.
  const uint64_t capacity = 2 * (64ull << 20);
  Result<int> memory = MakeArenaMemory(capacity);
  ASSERT_TRUE(memory.ok()) << memory.status().ToString();
  std::vector<uint64_t> slots;
  std::vector<std::string> bytes;
  {
    Arena first(capacity, *memory);
    EXPECT_TRUE(first.shared());
    std::vector<BlockRef> held;
    Reservation r = first.Reserve(first.capacity_blocks());
    for (size_t i = 0; i < first.capacity_blocks(); ++i) held.push_back(r.Take());
    for (size_t i : {size_t{0}, size_t{5}, first.capacity_blocks() - 1}) {
      std::memset(held[i].data(), static_cast<int>('a' + i % 26), kBlockSize);
      held[i].data()[17] = static_cast<char>(i);
      slots.push_back(held[i].slot());
      bytes.emplace_back(held[i].data(), kBlockSize);
    }
  }
  Arena next(capacity, *memory);
  Result<std::vector<BlockRef>> adopted = next.Adopt(slots);
  ASSERT_TRUE(adopted.ok()) << adopted.status().ToString();
  ASSERT_EQ(adopted->size(), slots.size());
  for (size_t i = 0; i < slots.size(); ++i) {
    EXPECT_EQ((*adopted)[i].slot(), slots[i]);
    EXPECT_EQ(std::string((*adopted)[i].data(), kBlockSize), bytes[i]) << "block " << slots[i];
  }
  EXPECT_EQ(next.used_blocks(), slots.size());
  // Every other block is handed out, none of the adopted ones.
  Reservation rest = next.Reserve(next.capacity_blocks() - slots.size());
  std::vector<BlockRef> others;
  std::set<uint64_t> taken;
  while (rest.count() > 0) taken.insert(others.emplace_back(rest.Take()).slot());
  EXPECT_EQ(taken.size(), next.capacity_blocks() - slots.size());
  for (uint64_t slot : slots) EXPECT_FALSE(taken.count(slot)) << slot;
  close(*memory);
}

TEST(ArenaTest, TheCapacityOfAMemoryFileIsFoundFromItsSizeAndOtherSizesAreRefused) {
  for (uint64_t capacity : {uint64_t{kBlockSize}, uint64_t{16} << 20, (uint64_t{64} << 20) + kBlockSize,
                            uint64_t{6} << 30}) {
    Result<uint64_t> found = ArenaCapacityOf(ArenaMemoryBytes(capacity));
    ASSERT_TRUE(found.ok()) << capacity;
    EXPECT_EQ(*found, capacity);
    EXPECT_EQ(ArenaCapacityOf(ArenaMemoryBytes(capacity) + 1).status().err(), EINVAL);
    EXPECT_EQ(ArenaCapacityOf(ArenaMemoryBytes(capacity) - 1).status().err(), EINVAL);
  }
  for (uint64_t hostile : {uint64_t{0}, uint64_t{1}, kArenaLogBytes, UINT64_MAX}) {
    EXPECT_FALSE(ArenaCapacityOf(hostile).ok()) << hostile;
  }
}

TEST(ArenaTest, AdoptingRefusesPrivateMemoryAndSlotsOutOfRange) {
  EXPECT_EQ(Arena(8 * kBlockSize).Adopt({0}).status().err(), EINVAL);
  Result<int> memory = MakeArenaMemory(8 * kBlockSize);
  ASSERT_TRUE(memory.ok());
  Arena arena(8 * kBlockSize, *memory);
  EXPECT_EQ(arena.Adopt({8}).status().err(), EINVAL);
  EXPECT_EQ(arena.Adopt({1, 1}).status().err(), EINVAL);
  EXPECT_EQ(arena.used_blocks(), 0u) << "a refused adoption takes nothing";
  close(*memory);
}

TEST(ArenaTest, PrefaultFaultsInTheWholeCapacityWhileBlocksAreInUse) {
  Arena arena(8 * kBlockSize + (8ull << 20));
  arena.Prefault([] { return true; });
  EXPECT_EQ(arena.mapped_blocks(), arena.capacity_blocks());
  Reservation r = arena.Reserve(8);
  std::vector<BlockRef> blocks;
  for (int i = 0; i < 8; ++i) {
    blocks.push_back(r.Take());
    std::memset(blocks.back().data(), 'a' + i, kBlockSize);
  }
  ASSERT_TRUE(Eventually([&] { return arena.prefault_done(); }, std::chrono::seconds(60)));
  EXPECT_EQ(arena.prefaulted_bytes(), arena.capacity_blocks() * kBlockSize);
  EXPECT_EQ(arena.mapped_blocks(), arena.capacity_blocks());
  for (int i = 0; i < 8; ++i) {
    const char* d = blocks[i].data();
    EXPECT_EQ(std::count(d, d + kBlockSize, static_cast<char>('a' + i)),
              static_cast<long>(kBlockSize));
  }
}

// The prefault faults nothing while its caller says it may not run, then goes on; stopping it
// while it waits returns.
TEST(ArenaTest, PrefaultWaitsWhileItMayNotRun) {
  Arena arena(8ull << 20);
  std::atomic<bool> may_run{false};
  std::atomic<int> asked{0};
  arena.Prefault([&] {
    ++asked;
    return may_run.load();
  });
  ASSERT_TRUE(Eventually([&] { return asked.load() >= 3; }));
  EXPECT_EQ(arena.prefaulted_bytes(), 0u);
  EXPECT_FALSE(arena.prefault_done());
  may_run = true;
  ASSERT_TRUE(Eventually([&] { return arena.prefault_done(); }, std::chrono::seconds(60)));
  EXPECT_EQ(arena.prefaulted_bytes(), 8ull << 20);

  Arena waiting(8ull << 20);
  waiting.Prefault([] { return false; });
  waiting.StopBackground();
  EXPECT_TRUE(waiting.prefault_done());
  EXPECT_EQ(waiting.prefaulted_bytes(), 0u);
}

// Whether any page of [data, data + len) is resident.
bool AnyResident(const char* data, size_t len) {
  long page = sysconf(_SC_PAGESIZE);
  std::vector<unsigned char> pages((len + page - 1) / page);
  if (mincore(const_cast<char*>(data), len, pages.data()) != 0) return true;
  return std::any_of(pages.begin(), pages.end(), [](unsigned char p) { return p & 1; });
}

// Private memory: the free 2 MiB runs go back, the run holding a used block stays with its data,
// nothing goes back twice, and blocks given back are handed out and written as any other.
TEST(ArenaTest, GiveBackIdleReturnsWholeRunsOfFreeBlocksAndKeepsTheUsedOnes) {
  constexpr uint64_t kMiB = 1ull << 20;
  Arena arena(8 * kMiB);
  arena.Prefault([] { return true; });
  ASSERT_TRUE(Eventually([&] { return arena.prefault_done(); }, std::chrono::seconds(60)));
  Reservation r = arena.Reserve(1);
  BlockRef used = r.Take();
  std::memset(used.data(), 'u', kBlockSize);
  EXPECT_EQ(arena.GiveBackIdle(4 * kMiB), 4 * kMiB) << "stops at what was wanted";
  EXPECT_EQ(arena.GiveBackIdle(UINT64_MAX), 2 * kMiB) << "the rest but the used block's run";
  EXPECT_EQ(arena.GiveBackIdle(UINT64_MAX), 0u) << "nothing goes back twice";
  EXPECT_EQ(arena.given_back_bytes(), 6 * kMiB);
  EXPECT_EQ(std::count(used.data(), used.data() + kBlockSize, 'u'), static_cast<long>(kBlockSize));

  Reservation rest = arena.Reserve(arena.capacity_blocks() - 1);
  std::vector<BlockRef> blocks;
  while (rest.count() > 0) blocks.push_back(rest.Take());  // Taking touches no memory.
  size_t resident = std::count_if(blocks.begin(), blocks.end(), [](const BlockRef& b) {
    return AnyResident(b.data(), kBlockSize);
  });
  EXPECT_EQ(resident, (2 * kMiB) / kBlockSize - 1) << "only the used block's run stayed resident";
  for (const BlockRef& b : blocks) std::memset(b.data(), 'x', kBlockSize);
  for (const BlockRef& b : blocks) {
    ASSERT_EQ(std::count(b.data(), b.data() + kBlockSize, 'x'), static_cast<long>(kBlockSize));
  }
}

// Shared memory: what goes back leaves the memory file (its allocated size shrinks), and a
// block handed out again reads as written.
TEST(ArenaTest, GiveBackIdleShrinksTheSharedMemoryFile) {
  constexpr uint64_t kMiB = 1ull << 20;
  Result<int> memory = MakeArenaMemory(8 * kMiB);
  ASSERT_TRUE(memory.ok());
  {
    Arena arena(8 * kMiB, *memory);
    arena.Prefault([] { return true; });
    ASSERT_TRUE(Eventually([&] { return arena.prefault_done(); }, std::chrono::seconds(60)));
    struct stat before {};
    ASSERT_EQ(fstat(*memory, &before), 0);
    EXPECT_GE(static_cast<uint64_t>(before.st_blocks) * 512, 8 * kMiB);
    EXPECT_EQ(arena.GiveBackIdle(UINT64_MAX), 8 * kMiB);
    struct stat after {};
    ASSERT_EQ(fstat(*memory, &after), 0);
    EXPECT_EQ(after.st_blocks, 0);
    Reservation r = arena.Reserve(1);
    BlockRef b = r.Take();
    std::memset(b.data(), 'y', kBlockSize);
    EXPECT_EQ(std::count(b.data(), b.data() + kBlockSize, 'y'), static_cast<long>(kBlockSize));
  }
  close(*memory);
}

// The watch runs beside writers (a race detector's case) and stops with the arena's background
// work.
TEST(ArenaTest, TheMemoryWatchRunsBesideWritersAndStops) {
  Arena arena(8ull << 20);
  arena.WatchSystemMemory();
  for (int round = 0; round < 50; ++round) {
    Reservation r = arena.Reserve(4);
    BlockRef b = r.Take();
    std::memset(b.data(), 'w', kBlockSize);
  }
  arena.StopBackground();
  Reservation after = arena.Reserve(arena.capacity_blocks());
  EXPECT_EQ(after.count(), arena.capacity_blocks()) << "every block came back";
}

}  // namespace
}  // namespace ckptfs
