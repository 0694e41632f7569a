#include "fs/fatal_signal.h"

#include <fstream>
#include <sstream>
#include <string>

namespace ckptfs {
namespace {

constexpr unsigned long long kSigkillBit = 1ull << (9 - 1);

}  // namespace

bool SigkillPendingIn(std::string_view proc_status) {
  for (std::string_view key : {"\nSigPnd:", "\nShdPnd:"}) {
    const size_t at = proc_status.find(key);
    if (at == std::string_view::npos) continue;
    std::istringstream mask(std::string(proc_status.substr(at + key.size(), 32)));
    unsigned long long bits = 0;
    if (mask >> std::hex >> bits && (bits & kSigkillBit) != 0) return true;
  }
  return false;
}

bool BeingKilled(pid_t tid) {
  if (tid <= 0) return false;
  std::ifstream in("/proc/" + std::to_string(tid) + "/status");
  if (!in.is_open()) return false;
  std::stringstream text;
  text << "\n" << in.rdbuf();
  return SigkillPendingIn(text.str());
}

}  // namespace ckptfs
