#include "iouring/fault_injecting_backend.h"

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <string>
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

// Forwards `requests` to `backend` in one call and stores each Status at results[slots[i]].
void Forward(Backend& backend, const std::vector<WriteRequest>& requests,
             const std::vector<size_t>& slots, std::vector<Status>& results) {
  if (requests.empty()) return;
  std::vector<Status> statuses = backend.Write(requests);
  for (size_t i = 0; i < slots.size(); ++i) results[slots[i]] = std::move(statuses[i]);
}

}  // namespace

FaultInjectingBackend::FaultInjectingBackend(std::unique_ptr<Backend> inner)
    : inner_(std::move(inner)) {}

std::string FaultInjectingBackend::Name() const { return "fault(" + inner_->Name() + ")"; }

std::vector<Status> FaultInjectingBackend::Write(std::span<const WriteRequest> requests) {
  std::vector<Status> results(requests.size());
  std::vector<bool> failed(requests.size(), false);
  bool short_writes;
  {
    std::lock_guard<std::mutex> lock(mu_);
    short_writes = short_writes_;
    for (size_t i = 0; i < requests.size(); ++i) {
      uint64_t index = writes_seen_++;
      if (index < fail_writes_from_ || index - fail_writes_from_ >= fail_writes_count_) continue;
      failed[i] = true;
      results[i] =
          Status::Error(write_err_, "write fd " + std::to_string(requests[i].fd) + " at offset " +
                                        std::to_string(requests[i].offset) + " (injected)");
    }
  }

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
  Forward(*inner_, heads, head_slots, results);

  std::vector<WriteRequest> rest;
  std::vector<size_t> rest_slots;
  for (size_t i = 0; i < tails.size(); ++i) {
    if (!results[tail_slots[i]].ok()) continue;
    rest.push_back(std::move(tails[i]));
    rest_slots.push_back(tail_slots[i]);
  }
  Forward(*inner_, rest, rest_slots, results);
  return results;
}

std::vector<Status> FaultInjectingBackend::Sync(std::span<const int> fds, bool data_only) {
  std::vector<Status> results(fds.size());
  std::vector<int> forwarded;
  std::vector<size_t> slots;
  {
    std::lock_guard<std::mutex> lock(mu_);
    syncs_seen_ += fds.size();
    for (size_t i = 0; i < fds.size(); ++i) {
      if (fail_syncs_left_ == 0) {
        forwarded.push_back(fds[i]);
        slots.push_back(i);
        continue;
      }
      --fail_syncs_left_;
      results[i] = Status::Error(sync_err_, (data_only ? "fdatasync fd " : "fsync fd ") +
                                                std::to_string(fds[i]) + " (injected)");
    }
  }
  if (forwarded.empty()) return results;
  std::vector<Status> statuses = inner_->Sync(forwarded, data_only);
  for (size_t i = 0; i < slots.size(); ++i) results[slots[i]] = std::move(statuses[i]);
  return results;
}

void FaultInjectingBackend::FailWritesFrom(uint64_t k, int err, uint64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_writes_from_ = k > UINT64_MAX - writes_seen_ ? UINT64_MAX : writes_seen_ + k;
  fail_writes_count_ = count;
  write_err_ = err;
}

void FaultInjectingBackend::ShortWrites(bool enabled) {
  std::lock_guard<std::mutex> lock(mu_);
  short_writes_ = enabled;
}

void FaultInjectingBackend::FailSyncs(int err, uint64_t count) {
  std::lock_guard<std::mutex> lock(mu_);
  fail_syncs_left_ = count;
  sync_err_ = err;
}

void FaultInjectingBackend::Heal() {
  std::lock_guard<std::mutex> lock(mu_);
  fail_writes_count_ = 0;
  fail_syncs_left_ = 0;
  short_writes_ = false;
}

uint64_t FaultInjectingBackend::writes_seen() const {
  std::lock_guard<std::mutex> lock(mu_);
  return writes_seen_;
}

uint64_t FaultInjectingBackend::syncs_seen() const {
  std::lock_guard<std::mutex> lock(mu_);
  return syncs_seen_;
}

}  // namespace ckptfs
