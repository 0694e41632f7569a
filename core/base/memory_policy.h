// How much of the system's memory the cache holds beyond what its files use: the prefault takes
// memory ahead of use while the system has plenty, and idle memory goes back when the system runs
// short. Pure functions of /proc/meminfo's figures, in one place so that their tests and users
// agree.
#pragma once

#include <chrono>
#include <cstdint>

namespace ckptfs::policy {

// The system's memory in bytes, as /proc/meminfo gives it (MemTotal, MemAvailable); total 0 when
// it could not be read.
struct SystemMemory {
  uint64_t total = 0;
  uint64_t available = 0;
};

// The system is short of memory below this much available: an eighth of its total.
inline uint64_t ShortOfMemoryBelow(const SystemMemory& m) { return m.total / 8; }

// Whether the cache may take memory ahead of use (prefault): while the system is not short.
inline bool MayTakeMemoryAhead(const SystemMemory& m) {
  return m.total == 0 || m.available > ShortOfMemoryBelow(m);
}

// Idle memory is given back beyond the shortfall by this much, so that a trainer growing
// steadily does not find the system short again at the next look.
inline constexpr uint64_t kGiveBackMargin = 256ull << 20;
// How often the cache looks at the system's memory.
inline constexpr std::chrono::milliseconds kSystemMemoryWatchPeriod{250};

// Bytes of idle cache memory to give back now: 0 while the system is not short, else what brings
// its available memory kGiveBackMargin above the shortage line.
inline uint64_t IdleMemoryToGiveBack(const SystemMemory& m) {
  if (m.total == 0 || m.available >= ShortOfMemoryBelow(m)) return 0;
  return ShortOfMemoryBelow(m) - m.available + kGiveBackMargin;
}

// Each serving thread holds about one request's worth of cache blocks ahead to land writes in
// (fs/write_landing.h), at most 16 threads: in a cache this large, at most a sixteenth of it.
inline constexpr uint64_t kMinCacheForWriteLanding = 256ull << 20;
inline bool LandsWrites(uint64_t cache_bytes) { return cache_bytes >= kMinCacheForWriteLanding; }

}  // namespace ckptfs::policy
