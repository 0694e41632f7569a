#include "fs/fatal_signal.h"

#include <string>

#include "fs/proc_files.h"

namespace ckptfs {
namespace {

constexpr uint64_t kSigkillBit = 1ull << (9 - 1);

}  // namespace

bool SigkillPendingIn(std::string_view proc_status) {
  for (std::string_view key : {"SigPnd", "ShdPnd"}) {
    const std::optional<uint64_t> pending = ProcStatusMask(proc_status, key);
    if (pending && (*pending & kSigkillBit) != 0) return true;
  }
  return false;
}

bool BeingKilled(pid_t tid) {
  if (tid <= 0) return false;
  const std::optional<std::string> status = ReadProcFile(tid, "status");
  return status && SigkillPendingIn(*status);
}

}  // namespace ckptfs
