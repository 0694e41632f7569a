// PosixEnv: the Env of plain system calls. Write is pwritev and Sync fdatasync/fsync, one request
// at a time; the io_uring Env inherits every single call from it and replaces only the batches.
#pragma once

#include <string>
#include <vector>

#include "iouring/env.h"

namespace ckptfs {

class PosixEnv : public Env {
 public:
  std::string Name() const override { return "posix"; }
  std::vector<Status> Write(std::span<const WriteRequest> requests) override;
  std::vector<Status> Sync(std::span<const int> fds, bool data_only) override;
  // One Read after the other.
  std::vector<Status> ReadBatch(std::span<const ReadBatchRequest> requests) override;

  Result<int> Open(int dir, const std::string& name, int flags, mode_t mode) override;
  void Close(int fd) override;
  Status Stat(int dir, const std::string& name, struct stat* st) override;
  Status StatFs(int fd, struct statvfs* st) override;
  Result<std::string> ReadLink(int dir, const std::string& name) override;
  Result<std::vector<std::string>> ListDir(int dir) override;
  Status Read(int fd, char* dst, size_t length, uint64_t offset) override;
  Status WriteAt(int fd, const char* src, size_t length, uint64_t offset) override;
  Status Copy(int from, int to, uint64_t length) override;
  Status Truncate(int fd, uint64_t size) override;
  Status Allocate(int fd, uint64_t offset, uint64_t length) override;
  void Advise(int fd, uint64_t offset, uint64_t length) override;
  Status SyncFs(int fd) override;
  Status Mkdir(int dir, const std::string& name, mode_t mode) override;
  Status Mknod(int dir, const std::string& name, mode_t mode, dev_t dev) override;
  Status Symlink(const std::string& target, int dir, const std::string& name) override;
  Status Link(int dir, const std::string& name, int new_dir, const std::string& new_name) override;
  Status Rename(int dir, const std::string& name, int new_dir, const std::string& new_name,
                unsigned flags) override;
  Status Unlink(int dir, const std::string& name, bool directory) override;
  Status Chmod(int dir, const std::string& name, mode_t mode) override;
  Status Chown(int dir, const std::string& name, uid_t uid, gid_t gid) override;
  Status SetTimes(int dir, const std::string& name, const timespec times[2]) override;
  Status SetXattr(int fd, const std::string& name, const std::string& value) override;
  Result<std::string> GetXattr(int fd, const std::string& name, size_t max_size) override;
};

}  // namespace ckptfs
