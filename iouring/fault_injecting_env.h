// FaultInjectingEnv: an EnvWrapper that fails, splits or delays chosen calls, so that tests
// can drive ckptfs through ENOSPC, EIO, short writes, a failing rename or mkdir and slow storage
// on a real backing store.
//
// Thread model: Write and Sync belong to one owner thread, as for every Env; the single calls may
// come from any thread. The fault knobs and counters may be used from any thread at any time; a
// call applies the faults as they are when it starts.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "iouring/env.h"
#include "iouring/env_wrapper.h"

namespace ckptfs {

class FaultInjectingEnv final : public EnvWrapper {
 public:
  // Calls of `op` whose name is `name` (either name of a rename or link; for Sync, "fdatasync" or
  // "fsync"; any call when empty; Write has no names): from now on, the first `skip` of them pass,
  // the `count` after them fail with `err` (a positive errno; 0: they pass too), and wait `delay`
  // first. A failed call is not forwarded: nothing of it reaches the backing store. For example
  // Fault(Op::kRename, EIO).Named("latest").Times(1).
  struct Fault {
    Fault(Op op_in, int err_in) : op(op_in), err(err_in) {}
    Fault& Named(std::string only) { name = std::move(only); return *this; }
    Fault& After(uint64_t calls) { skip = calls; return *this; }
    Fault& Times(uint64_t calls) { count = calls; return *this; }
    Fault& Delayed(std::chrono::milliseconds wait) { delay = wait; return *this; }

    Op op;
    int err;
    std::string name;
    uint64_t skip = 0;
    uint64_t count = UINT64_MAX;
    std::chrono::milliseconds delay{0};
  };

  // Forwards every call that is not failed to `inner`, which it owns.
  explicit FaultInjectingEnv(std::unique_ptr<Env> inner);

  FaultInjectingEnv(const FaultInjectingEnv&) = delete;
  FaultInjectingEnv& operator=(const FaultInjectingEnv&) = delete;

  // Adds `fault` to the faults in force.
  void Inject(Fault fault);

  // The `k`-th write request from now on (0 = the next one) and the `count - 1` after it fail
  // with `err`. Replaces any earlier write fault.
  void FailWritesFrom(uint64_t k, int err, uint64_t count = UINT64_MAX);

  // While enabled, every forwarded request of two bytes or more reaches the inner Env as two
  // pieces in two successive calls: the first half, then the rest (only if the first succeeded).
  void ShortWrites(bool enabled);

  // The next `count` write requests (of a byte or more) reach the inner Env with their first
  // byte changed, and succeed: a write corrupted on its way to the store.
  void CorruptWrites(uint64_t count);

  // The next `count` fds passed to Sync fail with `err`. Replaces any earlier sync fault.
  void FailSyncs(int err, uint64_t count = UINT64_MAX);

  // Clears every fault. Counters keep counting.
  void Heal();

  // Calls of `op` received so far, failed ones included (Write: requests; Sync: fds).
  uint64_t calls(Op op) const;
  uint64_t writes_seen() const { return calls(Op::kWrite); }
  uint64_t syncs_seen() const { return calls(Op::kSync); }

  // "fault(<inner name>)".
  std::string Name() const override;
  // A failed request reports Status::Error(err, "<write that failed> (injected)").
  std::vector<Status> Write(std::span<const WriteRequest> requests) override;
  // A failed fd is not synced and reports Status::Error(err, "<sync that failed> (injected)").
  std::vector<Status> Sync(std::span<const int> fds, bool data_only) override;

 protected:
  // Counts the call and applies the faults in force: waits their delay, then fails the call
  // with their error (a failed call does not reach the wrapped Env). Close and Advise, which
  // cannot fail, are only delayed.
  Status BeforeCall(Op op, std::initializer_list<std::string_view> names) override;

 private:
  struct ActiveFault {
    Fault fault;
    uint64_t matched = 0;  // Calls it matched since it was injected.
  };
  // Counts a call of `op` on `names` and applies the faults in force: the error to fail it with
  // (ok: forward it), and how long to wait first.
  Status Judge(Op op, std::initializer_list<std::string_view> names,
               std::chrono::milliseconds* delay);
  void RemoveFaults(Op op) REQUIRES(mu_);

  mutable Mutex mu_;
  std::vector<ActiveFault> faults_ GUARDED_BY(mu_);
  std::vector<uint64_t> calls_ GUARDED_BY(mu_);  // By Op.
  bool short_writes_ GUARDED_BY(mu_) = false;
  uint64_t corrupt_writes_ GUARDED_BY(mu_) = 0;
};

}  // namespace ckptfs
