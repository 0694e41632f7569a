#include "fs/cache_memory_file.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <thread>

#include "core/memory/arena.h"
#include "core/recovery/cache_memory_layout.h"

namespace ckptfs {

std::string CacheMemoryFileName(const struct stat& backing, const std::string& node) {
  char name[96];
  std::snprintf(name, sizeof name, "ckptfs-cache-%" PRIx64 "-%" PRIx64,
                static_cast<uint64_t>(backing.st_dev), static_cast<uint64_t>(backing.st_ino));
  return node.empty() ? name : std::string(name) + "-" + node;
}

Result<CacheMemoryFile> OpenCacheMemoryFile(const std::string& dir, const std::string& backing_dir,
                                            const std::string& node) {
  struct stat backing {};
  if (stat(backing_dir.c_str(), &backing) != 0) return Status::FromErrno(backing_dir);
  CacheMemoryFile file;
  file.path = dir + "/" + CacheMemoryFileName(backing, node);
  file.fd = open(file.path.c_str(), O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (file.fd < 0) return Status::FromErrno(file.path);
  auto refuse = [&](int err, const std::string& why) {
    close(file.fd);
    return Status::Error(err, file.path + ": " + why);
  };
  struct stat st {};
  if (fstat(file.fd, &st) != 0) return refuse(errno, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return refuse(EINVAL, "not a regular file");
  if (st.st_uid != geteuid()) return refuse(EPERM, "owned by another user");
  if ((st.st_mode & 077) != 0) return refuse(EPERM, "others may open it");
  // A mount whose supervisor was killed holds it until its worker, killed with it, is gone.
  const auto deadline = std::chrono::steady_clock::now() + kCacheMemoryLockWait;
  while (flock(file.fd, LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return refuse(errno, std::strerror(errno));
    if (std::chrono::steady_clock::now() >= deadline) {
      return refuse(EBUSY, "a live mount of " + backing_dir + " holds it");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (fstat(file.fd, &st) != 0) return refuse(errno, std::strerror(errno));
  file.left_by_earlier_mount = st.st_size > 0;
  return file;
}

Status SizeCacheMemoryFile(const CacheMemoryFile& file, uint64_t cache_size) {
  const uint64_t bytes = ArenaMemoryBytes(cache_size);
  if (ftruncate(file.fd, 0) != 0) return Status::FromErrno("emptying " + file.path);
  struct statvfs fs {};
  if (fstatvfs(file.fd, &fs) != 0) return Status::FromErrno(file.path);
  const uint64_t room = static_cast<uint64_t>(fs.f_bavail) * fs.f_frsize;
  if (room < bytes) {
    return Status::Error(ENOSPC, file.path + ": its filesystem has " + std::to_string(room >> 20) +
                                     " MiB free, the cache needs " + std::to_string(bytes >> 20) +
                                     " MiB");
  }
  if (ftruncate(file.fd, static_cast<off_t>(bytes)) != 0) {
    return Status::FromErrno("sizing " + file.path);
  }
  return Status::Ok();
}

void RemoveCacheMemoryFile(const CacheMemoryFile& file) {
  struct stat named {}, held {};
  if (lstat(file.path.c_str(), &named) == 0 && fstat(file.fd, &held) == 0 &&
      named.st_dev == held.st_dev && named.st_ino == held.st_ino) {
    unlink(file.path.c_str());
  }
}

}  // namespace ckptfs
