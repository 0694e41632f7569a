#include "core/replication/replica_memory.h"

#include <sys/mman.h>
#include <unistd.h>

#include <map>
#include <new>

#include "core/base/thread_annotations.h"
#include "core/replication/replication_policy.h"

namespace ckptfs::replication {

struct ReplicaMemory::Pool {
  explicit Pool(uint64_t limit) : limit(limit) {}
  ~Pool() {
    for (const auto& [bytes, at] : kept) munmap(at, bytes);
  }
  // Unmaps kept buffers, largest first, until `more` bytes may be mapped within the limit.
  void MakeRoomLocked(uint64_t more) REQUIRES(mu) {
    while (!kept.empty() && mapped + more > limit) {
      auto largest = std::prev(kept.end());
      munmap(largest->second, largest->first);
      mapped -= largest->first;
      kept.erase(largest);
    }
  }

  const uint64_t limit;
  mutable Mutex mu;
  uint64_t mapped GUARDED_BY(mu) = 0;
  std::multimap<uint64_t, char*> kept GUARDED_BY(mu);  // By bytes mapped.
};

ReplicaMemory::ReplicaMemory(uint64_t limit) : pool_(std::make_shared<Pool>(limit)) {}

std::shared_ptr<char[]> ReplicaMemory::Take(uint64_t size) {
  if (!policy::KeepsReplicaMemory(size)) {
    return std::shared_ptr<char[]>(new (std::nothrow) char[size ? size : 1]);
  }
  const uint64_t bytes = policy::ReplicaMapBytes(size, static_cast<uint64_t>(getpagesize()));
  char* at = nullptr;
  uint64_t mapped_bytes = bytes;
  {
    MutexLock lock(pool_->mu);
    auto fit = pool_->kept.lower_bound(bytes);
    if (fit != pool_->kept.end() && policy::ReusesReplicaMemory(fit->first, size)) {
      mapped_bytes = fit->first;
      at = fit->second;
      pool_->kept.erase(fit);
    } else {
      pool_->MakeRoomLocked(bytes);
      void* fresh = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (fresh == MAP_FAILED) return nullptr;
      at = static_cast<char*>(fresh);
      pool_->mapped += bytes;
    }
  }
  return std::shared_ptr<char[]>(at, [pool = pool_, mapped_bytes](char* p) {
    MutexLock lock(pool->mu);
    if (pool->mapped > pool->limit) {
      munmap(p, mapped_bytes);
      pool->mapped -= mapped_bytes;
    } else {
      pool->kept.emplace(mapped_bytes, p);
    }
  });
}

uint64_t ReplicaMemory::mapped_bytes() const {
  MutexLock lock(pool_->mu);
  return pool_->mapped;
}

}  // namespace ckptfs::replication
