#include "core/views/control_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ckptfs {

Attr ControlFiles::AttrOf(uint64_t ino) const {
  Attr a;
  a.ino = ino;
  a.uid = geteuid();
  a.gid = getegid();
  a.atime = a.mtime = a.ctime = start_;
  if (ino == kControlDirIno) {
    a.mode = S_IFDIR | 0755;
    a.nlink = 2;
    a.size = 4096;
  } else {
    // Sizes are unknown until generated; reads are direct, so 0 does not truncate them.
    // Only the mounting user may give commands (default_permissions enforces the mode).
    a.mode = S_IFREG | (ino == kStatsIno ? 0444 : 0600);
    a.nlink = 1;
  }
  return a;
}

Result<Attr> ControlFiles::Lookup(const std::string& name) const {
  if (name == "stats") return AttrOf(kStatsIno);
  if (name == "sync") return AttrOf(kSyncIno);
  if (name == "upgrade") return AttrOf(kUpgradeIno);
  return Status::Error(ENOENT, name);
}

std::vector<DirEntry> ControlFiles::List() const {
  return {{".", kControlDirIno, S_IFDIR},
          {"..", kRootIno, S_IFDIR},
          {"stats", kStatsIno, S_IFREG},
          {"sync", kSyncIno, S_IFREG},
          {"upgrade", kUpgradeIno, S_IFREG}};
}

Result<ControlFiles::OpenFile> ControlFiles::Open(uint64_t ino, int flags) {
  if (ino != kStatsIno && ino != kSyncIno && ino != kUpgradeIno) {
    return Status::Error(EISDIR, "control directory");
  }
  if (ino == kStatsIno && (flags & O_ACCMODE) != O_RDONLY) {
    return Status::Error(EACCES, "the stats file is read-only");
  }
  OpenFile file;
  file.ino = ino;
  if (ino == kStatsIno) file.content = source_.StatsJson();
  file.sync_point = source_.SyncPoint();
  return file;
}

Result<ReadData> ControlFiles::Read(OpenFile& file, uint64_t offset, size_t size) {
  if (file.ino == kSyncIno && file.content.empty()) {
    Status st = source_.WaitDurable(file.sync_point);
    file.content = st.ok() ? "ok\n" : "error: " + st.ToString() + "\n";
  }
  ReadData out;
  if (offset < file.content.size()) out.owned = file.content.substr(offset, size);
  return out;
}

Result<size_t> ControlFiles::Write(const OpenFile& file, std::string_view command) {
  if (file.ino == kStatsIno) return Status::Error(EBADF, "the stats file is read-only");
  std::string_view word = command.substr(0, command.find_last_not_of('\n') + 1);
  if (file.ino == kUpgradeIno) {
    if (word != "upgrade" && word.rfind("upgrade ", 0) != 0) {
      return Status::Error(EINVAL, "the upgrade file takes \"upgrade\" or \"upgrade PATH\"");
    }
    std::string binary(word.substr(std::min(word.size(), sizeof("upgrade"))));
    if (Status st = source_.RequestUpgrade(binary); !st.ok()) return st;
    return command.size();
  }
  if (word != "sync") return Status::Error(EINVAL, "the sync file takes the command \"sync\"");
  Status st = source_.WaitDurable(source_.SyncPoint());
  if (!st.ok()) return st;
  return command.size();
}

}  // namespace ckptfs
