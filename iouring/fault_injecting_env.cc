#include "iouring/fault_injecting_env.h"

#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace ckptfs {
namespace {

// Splits `request` after its first `at` bytes into `head` and `tail`.
void SplitRequest(const WriteRequest& request, uint64_t at, WriteRequest* head,
                  WriteRequest* tail) {
  head->fd = request.fd;
  head->offset = request.offset;
  tail->fd = request.fd;
  tail->offset = request.offset + at;
  for (const iovec& v : request.iov) {
    if (at >= v.iov_len) {
      head->iov.push_back(v);
      at -= v.iov_len;
    } else if (at > 0) {
      head->iov.push_back({v.iov_base, static_cast<size_t>(at)});
      tail->iov.push_back({static_cast<char*>(v.iov_base) + at, v.iov_len - at});
      at = 0;
    } else {
      tail->iov.push_back(v);
    }
  }
}

// Forwards `requests` to `env` in one call and stores each Status at results[slots[i]].
void ForwardWrites(Env& env, const std::vector<WriteRequest>& requests,
             const std::vector<size_t>& slots, std::vector<Status>& results) {
  if (requests.empty()) return;
  std::vector<Status> statuses = env.Write(requests);
  for (size_t i = 0; i < slots.size(); ++i) results[slots[i]] = std::move(statuses[i]);
}

}  // namespace

FaultInjectingEnv::FaultInjectingEnv(std::unique_ptr<Env> inner)
    : inner_(std::move(inner)), calls_(static_cast<size_t>(Op::kSetTimes) + 1, 0) {}

std::string FaultInjectingEnv::Name() const { return "fault(" + inner_->Name() + ")"; }

Status FaultInjectingEnv::Judge(Op op, std::initializer_list<std::string_view> names,
                                std::chrono::milliseconds* delay) {
  MutexLock lock(mu_);
  ++calls_[static_cast<size_t>(op)];
  Status verdict;
  for (ActiveFault& active : faults_) {
    const Fault& f = active.fault;
    if (f.op != op) continue;
    if (!f.name.empty() && std::find(names.begin(), names.end(), f.name) == names.end()) continue;
    uint64_t index = active.matched++;
    if (index < f.skip || index - f.skip >= f.count) continue;
    *delay = std::max(*delay, f.delay);
    if (f.err != 0 && verdict.ok()) {
      std::string what = OpName(op);
      for (std::string_view name : names) what += " " + std::string(name);
      verdict = Status::Error(f.err, what + " (injected)");
    }
  }
  return verdict;
}

void FaultInjectingEnv::Wait(Op op) {
  std::chrono::milliseconds delay{0};
  (void)Judge(op, {}, &delay);
  if (delay.count() > 0) std::this_thread::sleep_for(delay);
}

template <typename Forward>
auto FaultInjectingEnv::Pass(Op op, std::initializer_list<std::string_view> names,
                             Forward forward) -> decltype(forward()) {
  std::chrono::milliseconds delay{0};
  Status verdict = Judge(op, names, &delay);
  if (delay.count() > 0) std::this_thread::sleep_for(delay);
  if (!verdict.ok()) return verdict;
  return forward();
}

std::vector<Status> FaultInjectingEnv::Write(std::span<const WriteRequest> requests) {
  std::vector<Status> results(requests.size());
  std::vector<bool> failed(requests.size(), false);
  std::chrono::milliseconds delay{0};
  for (size_t i = 0; i < requests.size(); ++i) {
    Status verdict = Judge(Op::kWrite, {}, &delay);
    if (verdict.ok()) continue;
    failed[i] = true;
    results[i] = Status::Error(verdict.err(), "write fd " + std::to_string(requests[i].fd) +
                                                  " at offset " +
                                                  std::to_string(requests[i].offset) +
                                                  " (injected)");
  }
  bool short_writes;
  {
    MutexLock lock(mu_);
    short_writes = short_writes_;
  }
  if (delay.count() > 0) std::this_thread::sleep_for(delay);

  std::vector<WriteRequest> heads;
  std::vector<size_t> head_slots;
  std::vector<WriteRequest> tails;
  std::vector<size_t> tail_slots;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (failed[i]) continue;
    uint64_t total = requests[i].bytes();
    if (!short_writes || total < 2) {
      heads.push_back(requests[i]);
      head_slots.push_back(i);
      continue;
    }
    WriteRequest head;
    WriteRequest tail;
    SplitRequest(requests[i], total / 2, &head, &tail);
    heads.push_back(std::move(head));
    head_slots.push_back(i);
    tails.push_back(std::move(tail));
    tail_slots.push_back(i);
  }
  ForwardWrites(*inner_, heads, head_slots, results);

  std::vector<WriteRequest> rest;
  std::vector<size_t> rest_slots;
  for (size_t i = 0; i < tails.size(); ++i) {
    if (!results[tail_slots[i]].ok()) continue;
    rest.push_back(std::move(tails[i]));
    rest_slots.push_back(tail_slots[i]);
  }
  ForwardWrites(*inner_, rest, rest_slots, results);
  return results;
}

std::vector<Status> FaultInjectingEnv::Sync(std::span<const int> fds, bool data_only) {
  std::vector<Status> results(fds.size());
  std::vector<int> forwarded;
  std::vector<size_t> slots;
  std::chrono::milliseconds delay{0};
  for (size_t i = 0; i < fds.size(); ++i) {
    Status verdict = Judge(Op::kSync, {data_only ? "fdatasync" : "fsync"}, &delay);
    if (verdict.ok()) {
      forwarded.push_back(fds[i]);
      slots.push_back(i);
      continue;
    }
    results[i] = Status::Error(verdict.err(), (data_only ? "fdatasync fd " : "fsync fd ") +
                                                  std::to_string(fds[i]) + " (injected)");
  }
  if (delay.count() > 0) std::this_thread::sleep_for(delay);
  if (forwarded.empty()) return results;
  std::vector<Status> statuses = inner_->Sync(forwarded, data_only);
  for (size_t i = 0; i < slots.size(); ++i) results[slots[i]] = std::move(statuses[i]);
  return results;
}

Result<int> FaultInjectingEnv::Open(int dir, const std::string& name, int flags, mode_t mode) {
  return Pass(Op::kOpen, {name},
              [&]() -> Result<int> { return inner_->Open(dir, name, flags, mode); });
}

void FaultInjectingEnv::Close(int fd) {
  Wait(Op::kClose);
  inner_->Close(fd);
}

Status FaultInjectingEnv::Stat(int dir, const std::string& name, struct stat* st) {
  return Pass(Op::kStat, {name}, [&] { return inner_->Stat(dir, name, st); });
}

Status FaultInjectingEnv::StatFs(int fd, struct statvfs* st) {
  return Pass(Op::kStatFs, {}, [&] { return inner_->StatFs(fd, st); });
}

Result<std::string> FaultInjectingEnv::ReadLink(int dir, const std::string& name) {
  return Pass(Op::kReadLink, {name},
              [&]() -> Result<std::string> { return inner_->ReadLink(dir, name); });
}

Result<std::vector<std::string>> FaultInjectingEnv::ListDir(int dir) {
  return Pass(Op::kListDir, {},
              [&]() -> Result<std::vector<std::string>> { return inner_->ListDir(dir); });
}

Status FaultInjectingEnv::Read(int fd, char* dst, size_t length, uint64_t offset) {
  return Pass(Op::kRead, {}, [&] { return inner_->Read(fd, dst, length, offset); });
}

Status FaultInjectingEnv::WriteAt(int fd, const char* src, size_t length, uint64_t offset) {
  return Pass(Op::kWriteAt, {}, [&] { return inner_->WriteAt(fd, src, length, offset); });
}

Status FaultInjectingEnv::Copy(int from, int to, uint64_t length) {
  return Pass(Op::kCopy, {}, [&] { return inner_->Copy(from, to, length); });
}

Status FaultInjectingEnv::Truncate(int fd, uint64_t size) {
  return Pass(Op::kTruncate, {}, [&] { return inner_->Truncate(fd, size); });
}

Status FaultInjectingEnv::Allocate(int fd, uint64_t offset, uint64_t length) {
  return Pass(Op::kAllocate, {}, [&] { return inner_->Allocate(fd, offset, length); });
}

void FaultInjectingEnv::Advise(int fd, uint64_t offset, uint64_t length) {
  Wait(Op::kAdvise);
  inner_->Advise(fd, offset, length);
}

Status FaultInjectingEnv::SyncFs(int fd) {
  return Pass(Op::kSyncFs, {}, [&] { return inner_->SyncFs(fd); });
}

Status FaultInjectingEnv::Mkdir(int dir, const std::string& name, mode_t mode) {
  return Pass(Op::kMkdir, {name}, [&] { return inner_->Mkdir(dir, name, mode); });
}

Status FaultInjectingEnv::Mknod(int dir, const std::string& name, mode_t mode, dev_t dev) {
  return Pass(Op::kMknod, {name}, [&] { return inner_->Mknod(dir, name, mode, dev); });
}

Status FaultInjectingEnv::Symlink(const std::string& target, int dir, const std::string& name) {
  return Pass(Op::kSymlink, {name}, [&] { return inner_->Symlink(target, dir, name); });
}

Status FaultInjectingEnv::Link(int dir, const std::string& name, int new_dir,
                               const std::string& new_name) {
  return Pass(Op::kLink, {name, new_name},
              [&] { return inner_->Link(dir, name, new_dir, new_name); });
}

Status FaultInjectingEnv::Rename(int dir, const std::string& name, int new_dir,
                                 const std::string& new_name, unsigned flags) {
  return Pass(Op::kRename, {name, new_name},
              [&] { return inner_->Rename(dir, name, new_dir, new_name, flags); });
}

Status FaultInjectingEnv::Unlink(int dir, const std::string& name, bool directory) {
  return Pass(Op::kUnlink, {name}, [&] { return inner_->Unlink(dir, name, directory); });
}

Status FaultInjectingEnv::Chmod(int dir, const std::string& name, mode_t mode) {
  return Pass(Op::kChmod, {name}, [&] { return inner_->Chmod(dir, name, mode); });
}

Status FaultInjectingEnv::Chown(int dir, const std::string& name, uid_t uid, gid_t gid) {
  return Pass(Op::kChown, {name}, [&] { return inner_->Chown(dir, name, uid, gid); });
}

Status FaultInjectingEnv::SetTimes(int dir, const std::string& name, const timespec times[2]) {
  return Pass(Op::kSetTimes, {name}, [&] { return inner_->SetTimes(dir, name, times); });
}

void FaultInjectingEnv::Inject(Fault fault) {
  MutexLock lock(mu_);
  faults_.push_back(ActiveFault{std::move(fault)});
}

void FaultInjectingEnv::RemoveFaults(Op op) {
  std::erase_if(faults_, [op](const ActiveFault& a) { return a.fault.op == op; });
}

void FaultInjectingEnv::FailWritesFrom(uint64_t k, int err, uint64_t count) {
  MutexLock lock(mu_);
  RemoveFaults(Op::kWrite);
  faults_.push_back(ActiveFault{Fault(Op::kWrite, err).After(k).Times(count)});
}

void FaultInjectingEnv::ShortWrites(bool enabled) {
  MutexLock lock(mu_);
  short_writes_ = enabled;
}

void FaultInjectingEnv::FailSyncs(int err, uint64_t count) {
  MutexLock lock(mu_);
  RemoveFaults(Op::kSync);
  faults_.push_back(ActiveFault{Fault(Op::kSync, err).Times(count)});
}

void FaultInjectingEnv::Heal() {
  MutexLock lock(mu_);
  faults_.clear();
  short_writes_ = false;
}

uint64_t FaultInjectingEnv::calls(Op op) const {
  MutexLock lock(mu_);
  return calls_[static_cast<size_t>(op)];
}

}  // namespace ckptfs
