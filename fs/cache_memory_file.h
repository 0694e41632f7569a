// The file that holds a mount's cache in shared memory, /dev/shm/ckptfs-cache-<dev>-<ino>[-<node>]:
// named after the backing directory (and, in shared mode, the node), so that when the mount's
// daemon dies, the next mount of the same backing store finds what it had not made durable
// (core/filesystem/earlier_mount.h). A mount that ends having flushed everything removes it.
//
// The file is the mount's alone: made 0600, never reached through a symlink, refused when another
// user owns it or others may open it, and locked (flock) while a mount holds it, so that no two
// live mounts share it.
#pragma once

#include <sys/stat.h>

#include <chrono>
#include <cstdint>
#include <string>

#include "core/base/status.h"

namespace ckptfs {

inline constexpr const char* kCacheMemoryDir = "/dev/shm";

struct CacheMemoryFile {
  int fd = -1;  // Locked, close-on-exec.
  std::string path;
  bool left_by_earlier_mount = false;  // Not empty when opened: a mount that died left it.
};

// The name of the cache memory file of the backing directory `backing` (its stat) and `node`
// (empty unless shared).
std::string CacheMemoryFileName(const struct stat& backing, const std::string& node);

// How long a mount waits for the lock of a cache memory file held by a mount that is going.
inline constexpr std::chrono::seconds kCacheMemoryLockWait{5};

// Opens the cache memory file of `backing_dir` and `node` in directory `dir`, made if missing,
// and locks it. EBUSY: a live mount still holds it after kCacheMemoryLockWait; EPERM: another
// user's, or others may open it.
Result<CacheMemoryFile> OpenCacheMemoryFile(const std::string& dir, const std::string& backing_dir,
                                            const std::string& node);

// Empties the file and sizes it for a cache of `cache_size` bytes (ArenaMemoryBytes). ENOSPC
// when its filesystem has not that much room (the cache would die of SIGBUS once it filled).
Status SizeCacheMemoryFile(const CacheMemoryFile& file, uint64_t cache_size);

// Removes the file, when its path still names it.
void RemoveCacheMemoryFile(const CacheMemoryFile& file);

}  // namespace ckptfs
