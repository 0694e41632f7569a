// ReplicaMemory: the memory a partner receives replicas into. The memory of a dropped replica of
// at least policy::kKeptReplicaBytes stays mapped for the next one of about its size (a
// checkpoint's files are the size of the previous checkpoint's): memory mapped afresh is faulted
// in page by page as the replica arrives, which costs this VM's receiving thread as much CPU as
// receiving it. It keeps at most `limit` bytes mapped (in use and kept), more only while replicas
// in use need more.
//
// Thread-safe. A replica may outlive the ReplicaMemory it came from.
#pragma once

#include <cstdint>
#include <memory>

namespace ckptfs::replication {

class ReplicaMemory {
 public:
  explicit ReplicaMemory(uint64_t limit);

  // `size` bytes for a replica (one at least), given back here when its last copy is dropped.
  // Null when no memory can be mapped.
  std::shared_ptr<char[]> Take(uint64_t size);
  // The bytes mapped for replicas of at least policy::kKeptReplicaBytes, in use and kept.
  uint64_t mapped_bytes() const;

 private:
  struct Pool;
  std::shared_ptr<Pool> pool_;
};

}  // namespace ckptfs::replication
