#include "fs/forked_writer.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cctype>
#include <string>

namespace ckptfs {
namespace {

constexpr std::chrono::seconds kJudgedFor{1};
constexpr size_t kMaxJudged = 1024;
// /proc/PID/status is about 1.5 KiB; a command line longer than this compares by its start.
constexpr size_t kMaxProcText = 16 << 10;

// The start of /proc/`pid`/`name`, or nullopt when it cannot be read.
std::optional<std::string> ReadProc(pid_t pid, const char* name) {
  const std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text(kMaxProcText, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = read(fd, text.data() + got, text.size() - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  text.resize(got);
  return text;
}

std::optional<std::string> ExecutableOf(pid_t pid) {
  const std::string link = "/proc/" + std::to_string(pid) + "/exe";
  std::array<char, 4096> target;
  const ssize_t n = readlink(link.c_str(), target.data(), target.size());
  if (n <= 0 || static_cast<size_t>(n) == target.size()) return std::nullopt;
  return std::string(target.data(), static_cast<size_t>(n));
}

}  // namespace

std::optional<uint64_t> ProcStatusField(std::string_view status, std::string_view key) {
  size_t at = 0;
  while (at < status.size()) {
    const size_t end = std::min(status.find('\n', at), status.size());
    std::string_view line = status.substr(at, end - at);
    at = end + 1;
    if (line.size() <= key.size() || line.substr(0, key.size()) != key ||
        line[key.size()] != ':') {
      continue;
    }
    line.remove_prefix(key.size() + 1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    if (line.empty() || !std::isdigit(static_cast<unsigned char>(line.front()))) {
      return std::nullopt;
    }
    uint64_t value = 0;
    for (char ch : line) {
      if (!std::isdigit(static_cast<unsigned char>(ch))) break;
      if (value > (UINT64_MAX - 9) / 10) return std::nullopt;
      value = value * 10 + static_cast<uint64_t>(ch - '0');
    }
    return value;
  }
  return std::nullopt;
}

std::optional<policy::WriterProcess> ReadWriterProcess(pid_t tid) {
  if (tid <= 0) return std::nullopt;
  const std::optional<std::string> status = ReadProc(tid, "status");
  if (!status) return std::nullopt;
  const std::optional<uint64_t> tgid = ProcStatusField(*status, "Tgid");
  const std::optional<uint64_t> ppid = ProcStatusField(*status, "PPid");
  const std::optional<uint64_t> anon_kib = ProcStatusField(*status, "RssAnon");
  if (!tgid || !ppid || !anon_kib || *ppid <= 1) return std::nullopt;
  const pid_t process = static_cast<pid_t>(*tgid);
  const pid_t parent = static_cast<pid_t>(*ppid);
  const std::optional<std::string> parent_status = ReadProc(parent, "status");
  const std::optional<uint64_t> parent_anon_kib =
      parent_status ? ProcStatusField(*parent_status, "RssAnon") : std::nullopt;
  if (!parent_anon_kib) return std::nullopt;
  const std::optional<std::string> exe = ExecutableOf(process);
  const std::optional<std::string> parent_exe = ExecutableOf(parent);
  const std::optional<std::string> cmdline = ReadProc(process, "cmdline");
  const std::optional<std::string> parent_cmdline = ReadProc(parent, "cmdline");
  return policy::WriterProcess{
      .forked_without_exec = exe && parent_exe && *exe == *parent_exe && cmdline &&
                             parent_cmdline && *cmdline == *parent_cmdline,
      .anon_bytes = *anon_kib << 10,
      .parent_anon_bytes = *parent_anon_kib << 10,
  };
}

bool ForkedWriters::WritesForkedMemory(pid_t tid) {
  const auto now = std::chrono::steady_clock::now();
  {
    MutexLock lock(mu_);
    auto it = judged_.find(tid);
    if (it != judged_.end() && now - it->second.at < kJudgedFor) return it->second.forked;
  }
  const std::optional<policy::WriterProcess> facts = ReadWriterProcess(tid);
  const bool forked = facts && policy::WritesFromForkedMemory(*facts);
  MutexLock lock(mu_);
  if (judged_.size() >= kMaxJudged) judged_.clear();
  judged_[tid] = {forked, now};
  return forked;
}

}  // namespace ckptfs
