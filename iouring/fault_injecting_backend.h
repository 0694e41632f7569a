// FaultInjectingBackend: wraps another Backend and fails or splits chosen requests, so that tests
// can drive ckptfs through ENOSPC, EIO and short writes on a real backing store.
//
// Thread model: Write and Sync belong to one owner thread, as for every Backend. The fault knobs
// and counters may be used from any thread at any time; a call to Write or Sync applies the knobs
// as they are when it starts.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "iouring/backend.h"

namespace ckptfs {

class FaultInjectingBackend final : public Backend {
 public:
  // Forwards every request that is not failed to `inner`, which it owns.
  explicit FaultInjectingBackend(std::unique_ptr<Backend> inner);

  FaultInjectingBackend(const FaultInjectingBackend&) = delete;
  FaultInjectingBackend& operator=(const FaultInjectingBackend&) = delete;

  // "fault(<inner name>)".
  std::string Name() const override;

  // A failed request is not forwarded (nothing of it is written) and reports
  // Status::Error(err, "<write that failed> (injected)").
  std::vector<Status> Write(std::span<const WriteRequest> requests) override;

  // A failed fd is not synced and reports Status::Error(err, "<sync that failed> (injected)").
  std::vector<Status> Sync(std::span<const int> fds, bool data_only) override;

  // The `k`-th write request from now on (0 = the next one) and the `count - 1` after it fail
  // with `err` (a positive errno). Replaces any earlier write fault.
  void FailWritesFrom(uint64_t k, int err, uint64_t count = UINT64_MAX);

  // While enabled, every forwarded request of two bytes or more reaches the inner backend as two
  // pieces in two successive calls: the first half, then the rest (only if the first succeeded).
  void ShortWrites(bool enabled);

  // The next `count` fds passed to Sync fail with `err` (a positive errno). Replaces any earlier
  // sync fault.
  void FailSyncs(int err, uint64_t count = UINT64_MAX);

  // Clears every fault. Counters keep counting.
  void Heal();

  // Write requests (respectively fds to sync) received so far, failed ones included.
  uint64_t writes_seen() const;
  uint64_t syncs_seen() const;

 private:
  const std::unique_ptr<Backend> inner_;

  mutable std::mutex mu_;
  uint64_t writes_seen_ = 0;        // guarded by mu_
  uint64_t syncs_seen_ = 0;         // guarded by mu_
  uint64_t fail_writes_from_ = 0;   // guarded by mu_; index in writes_seen_ terms
  uint64_t fail_writes_count_ = 0;  // guarded by mu_; 0 = no write fault
  int write_err_ = 0;               // guarded by mu_
  uint64_t fail_syncs_left_ = 0;    // guarded by mu_
  int sync_err_ = 0;                // guarded by mu_
  bool short_writes_ = false;       // guarded by mu_
};

}  // namespace ckptfs
