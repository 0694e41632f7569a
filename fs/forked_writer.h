// Whether the process behind a write-only open writes from memory it shares copy-on-write with
// its parent (policy::WritesFromForkedMemory), judged from /proc.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <unordered_map>

#include "core/base/thread_annotations.h"
#include "core/filesystem/open_mode.h"

namespace ckptfs {

// The facts of thread `tid`'s process and of its parent; nullopt when /proc does not tell them
// (the process or its parent gone, a kernel thread).
std::optional<policy::WriterProcess> ReadWriterProcess(pid_t tid);

// ReadWriterProcess judged by policy::WritesFromForkedMemory, remembered per thread for a
// second: the answer changes only at fork, exec and as memory grows, and a stale one costs
// speed, never correctness. Thread-safe.
class ForkedWriters {
 public:
  bool WritesForkedMemory(pid_t tid) EXCLUDES(mu_);

 private:
  struct Judged {
    bool forked;
    std::chrono::steady_clock::time_point at;
  };
  Mutex mu_;
  std::unordered_map<pid_t, Judged> judged_ GUARDED_BY(mu_);  // At most a thousand entries.
};

}  // namespace ckptfs
