#include "iouring/fault_injecting_env.h"

#include <sys/uio.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
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
    : EnvWrapper(std::move(inner)), calls_(static_cast<size_t>(Op::kLastOp) + 1, 0) {}

std::string FaultInjectingEnv::Name() const { return "fault(" + target().Name() + ")"; }

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

Status FaultInjectingEnv::BeforeCall(Op op, std::initializer_list<std::string_view> names) {
  std::chrono::milliseconds delay{0};
  Status verdict = Judge(op, names, &delay);
  if (delay.count() > 0) std::this_thread::sleep_for(delay);
  return verdict;
}

namespace {

// A write request's bytes copied into one buffer aligned for O_DIRECT, the first byte changed.
class CorruptedCopy {
 public:
  explicit CorruptedCopy(const WriteRequest& original)
      : fd_(original.fd), offset_(original.offset), length_(original.bytes()) {
    const size_t rounded = (length_ + kAlign - 1) / kAlign * kAlign;
    data_.reset(static_cast<char*>(std::aligned_alloc(kAlign, rounded)));
    size_t at = 0;
    for (const iovec& v : original.iov) {
      std::memcpy(data_.get() + at, v.iov_base, v.iov_len);
      at += v.iov_len;
    }
    data_[0] = static_cast<char>(data_[0] ^ 0xff);
  }
  WriteRequest request() const {
    return WriteRequest{fd_, offset_, {iovec{data_.get(), length_}}};
  }

 private:
  static constexpr size_t kAlign = 4096;
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  int fd_;
  uint64_t offset_;
  size_t length_;
  std::unique_ptr<char[], Free> data_;
};

}  // namespace

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
  uint64_t corrupt;
  {
    MutexLock lock(mu_);
    short_writes = short_writes_;
    corrupt = corrupt_writes_;
  }
  if (delay.count() > 0) std::this_thread::sleep_for(delay);

  std::vector<WriteRequest> heads;
  std::vector<size_t> head_slots;
  std::vector<WriteRequest> tails;
  std::vector<size_t> tail_slots;
  std::vector<CorruptedCopy> copies;
  for (size_t i = 0; i < requests.size(); ++i) {
    if (failed[i]) continue;
    uint64_t total = requests[i].bytes();
    if (corrupt > 0 && total > 0) {
      --corrupt;
      copies.emplace_back(requests[i]);
      heads.push_back(copies.back().request());
      head_slots.push_back(i);
      continue;
    }
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
  {
    MutexLock lock(mu_);
    corrupt_writes_ -= std::min<uint64_t>(corrupt_writes_, copies.size());
  }
  ForwardWrites(target(), heads, head_slots, results);

  std::vector<WriteRequest> rest;
  std::vector<size_t> rest_slots;
  for (size_t i = 0; i < tails.size(); ++i) {
    if (!results[tail_slots[i]].ok()) continue;
    rest.push_back(std::move(tails[i]));
    rest_slots.push_back(tail_slots[i]);
  }
  ForwardWrites(target(), rest, rest_slots, results);
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
  std::vector<Status> statuses = target().Sync(forwarded, data_only);
  for (size_t i = 0; i < slots.size(); ++i) results[slots[i]] = std::move(statuses[i]);
  return results;
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

void FaultInjectingEnv::CorruptWrites(uint64_t count) {
  MutexLock lock(mu_);
  corrupt_writes_ = count;
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
  corrupt_writes_ = 0;
}

uint64_t FaultInjectingEnv::calls(Op op) const {
  MutexLock lock(mu_);
  return calls_[static_cast<size_t>(op)];
}

}  // namespace ckptfs
