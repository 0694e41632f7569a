#include "fs/forked_writer.h"

#include <string>

#include "fs/proc_files.h"

namespace ckptfs {
namespace {

constexpr std::chrono::seconds kJudgedFor{1};
constexpr size_t kMaxJudged = 1024;

}  // namespace

std::optional<policy::WriterProcess> ReadWriterProcess(pid_t tid) {
  if (tid <= 0) return std::nullopt;
  const std::optional<std::string> status = ReadProcFile(tid, "status");
  if (!status) return std::nullopt;
  const std::optional<uint64_t> tgid = ProcStatusField(*status, "Tgid");
  const std::optional<uint64_t> ppid = ProcStatusField(*status, "PPid");
  const std::optional<uint64_t> anon_kib = ProcStatusField(*status, "RssAnon");
  if (!tgid || !ppid || !anon_kib || *ppid <= 1) return std::nullopt;
  const pid_t process = static_cast<pid_t>(*tgid);
  const pid_t parent = static_cast<pid_t>(*ppid);
  const std::optional<std::string> parent_status = ReadProcFile(parent, "status");
  const std::optional<uint64_t> parent_anon_kib =
      parent_status ? ProcStatusField(*parent_status, "RssAnon") : std::nullopt;
  if (!parent_anon_kib) return std::nullopt;
  const std::optional<std::string> exe = ProcExecutable(process);
  const std::optional<std::string> parent_exe = ProcExecutable(parent);
  const std::optional<std::string> cmdline = ReadProcFile(process, "cmdline");
  const std::optional<std::string> parent_cmdline = ReadProcFile(parent, "cmdline");
  const bool forked = exe && parent_exe && *exe == *parent_exe && cmdline && parent_cmdline &&
                      *cmdline == *parent_cmdline;
  // Whether the parent is a fork server matters, and is read, only for a forked writer.
  bool parent_is_fork_server = false;
  if (forked) {
    const std::optional<uint64_t> grandparent = ProcStatusField(*parent_status, "PPid");
    const std::optional<std::string> grandparent_cmdline =
        grandparent && *grandparent > 0 ? ReadProcFile(static_cast<pid_t>(*grandparent), "cmdline")
                                        : std::nullopt;
    parent_is_fork_server = policy::IsForkServer(*parent_cmdline, grandparent_cmdline.value_or(""));
  }
  return policy::WriterProcess{
      .forked_without_exec = forked,
      .parent_is_fork_server = parent_is_fork_server,
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
