#include "iouring/env_wrapper.h"

namespace ckptfs {

template <typename Forward>
auto EnvWrapper::Forwarded(Op op, std::initializer_list<std::string_view> names, Forward forward)
    -> decltype(forward()) {
  Status verdict = BeforeCall(op, names);
  if (!verdict.ok()) return verdict;
  return forward();
}

Result<int> EnvWrapper::Open(int dir, const std::string& name, int flags, mode_t mode) {
  return Forwarded(Op::kOpen, {name},
                   [&]() -> Result<int> { return target_->Open(dir, name, flags, mode); });
}

void EnvWrapper::Close(int fd) {
  (void)BeforeCall(Op::kClose, {});
  target_->Close(fd);
}

Status EnvWrapper::Stat(int dir, const std::string& name, struct stat* st) {
  return Forwarded(Op::kStat, {name}, [&] { return target_->Stat(dir, name, st); });
}

Status EnvWrapper::StatFs(int fd, struct statvfs* st) {
  return Forwarded(Op::kStatFs, {}, [&] { return target_->StatFs(fd, st); });
}

Result<std::string> EnvWrapper::ReadLink(int dir, const std::string& name) {
  return Forwarded(Op::kReadLink, {name},
                   [&]() -> Result<std::string> { return target_->ReadLink(dir, name); });
}

Result<std::vector<std::string>> EnvWrapper::ListDir(int dir) {
  return Forwarded(Op::kListDir, {},
                   [&]() -> Result<std::vector<std::string>> { return target_->ListDir(dir); });
}

Status EnvWrapper::Read(int fd, char* dst, size_t length, uint64_t offset) {
  return Forwarded(Op::kRead, {}, [&] { return target_->Read(fd, dst, length, offset); });
}

std::vector<Status> EnvWrapper::ReadBatch(std::span<const ReadBatchRequest> requests) {
  std::vector<Status> results(requests.size());
  std::vector<ReadBatchRequest> forwarded;
  std::vector<size_t> slots;
  for (size_t i = 0; i < requests.size(); ++i) {
    results[i] = BeforeCall(Op::kRead, {});
    if (!results[i].ok()) continue;
    forwarded.push_back(requests[i]);
    slots.push_back(i);
  }
  if (forwarded.empty()) return results;
  std::vector<Status> statuses = target_->ReadBatch(forwarded);
  for (size_t k = 0; k < slots.size(); ++k) results[slots[k]] = std::move(statuses[k]);
  return results;
}

Status EnvWrapper::WriteAt(int fd, const char* src, size_t length, uint64_t offset) {
  return Forwarded(Op::kWriteAt, {}, [&] { return target_->WriteAt(fd, src, length, offset); });
}

Status EnvWrapper::Copy(int from, int to, uint64_t length) {
  return Forwarded(Op::kCopy, {}, [&] { return target_->Copy(from, to, length); });
}

Status EnvWrapper::Truncate(int fd, uint64_t size) {
  return Forwarded(Op::kTruncate, {}, [&] { return target_->Truncate(fd, size); });
}

Status EnvWrapper::Allocate(int fd, uint64_t offset, uint64_t length) {
  return Forwarded(Op::kAllocate, {}, [&] { return target_->Allocate(fd, offset, length); });
}

void EnvWrapper::Advise(int fd, uint64_t offset, uint64_t length) {
  (void)BeforeCall(Op::kAdvise, {});
  target_->Advise(fd, offset, length);
}

Status EnvWrapper::SyncFs(int fd) {
  return Forwarded(Op::kSyncFs, {}, [&] { return target_->SyncFs(fd); });
}

Status EnvWrapper::Mkdir(int dir, const std::string& name, mode_t mode) {
  return Forwarded(Op::kMkdir, {name}, [&] { return target_->Mkdir(dir, name, mode); });
}

Status EnvWrapper::Mknod(int dir, const std::string& name, mode_t mode, dev_t dev) {
  return Forwarded(Op::kMknod, {name}, [&] { return target_->Mknod(dir, name, mode, dev); });
}

Status EnvWrapper::Symlink(const std::string& target, int dir, const std::string& name) {
  return Forwarded(Op::kSymlink, {name}, [&] { return target_->Symlink(target, dir, name); });
}

Status EnvWrapper::Link(int dir, const std::string& name, int new_dir,
                        const std::string& new_name) {
  return Forwarded(Op::kLink, {name, new_name},
                   [&] { return target_->Link(dir, name, new_dir, new_name); });
}

Status EnvWrapper::Rename(int dir, const std::string& name, int new_dir,
                          const std::string& new_name, unsigned flags) {
  return Forwarded(Op::kRename, {name, new_name},
                   [&] { return target_->Rename(dir, name, new_dir, new_name, flags); });
}

Status EnvWrapper::Unlink(int dir, const std::string& name, bool directory) {
  return Forwarded(Op::kUnlink, {name}, [&] { return target_->Unlink(dir, name, directory); });
}

Status EnvWrapper::Chmod(int dir, const std::string& name, mode_t mode) {
  return Forwarded(Op::kChmod, {name}, [&] { return target_->Chmod(dir, name, mode); });
}

Status EnvWrapper::Chown(int dir, const std::string& name, uid_t uid, gid_t gid) {
  return Forwarded(Op::kChown, {name}, [&] { return target_->Chown(dir, name, uid, gid); });
}

Status EnvWrapper::SetTimes(int dir, const std::string& name, const timespec times[2]) {
  return Forwarded(Op::kSetTimes, {name}, [&] { return target_->SetTimes(dir, name, times); });
}

Status EnvWrapper::SetXattr(int fd, const std::string& name, const std::string& value) {
  return Forwarded(Op::kSetXattr, {name}, [&] { return target_->SetXattr(fd, name, value); });
}

Result<std::string> EnvWrapper::GetXattr(int fd, const std::string& name, size_t max_size) {
  return Forwarded(Op::kGetXattr, {name}, [&] { return target_->GetXattr(fd, name, max_size); });
}

}  // namespace ckptfs
