#include "fs/huge_pages.h"

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>

#include "fs/mount_info.h"

namespace ckptfs {
namespace {

bool GivesHugePages(std::string_view word) {
  return word == "always" || word == "within_size" || word == "advise" || word == "force";
}

std::string ThpSetting(const std::string& name) {
  std::ifstream in(kThpDir + name);
  std::string text;
  std::getline(in, text);
  return SelectedWord(text);
}

// Writes `word` to the transparent huge page setting `name`; "" on success, else why not.
std::string SetThpSetting(const std::string& name, const char* word) {
  const std::string path = kThpDir + name;
  const ssize_t length = static_cast<ssize_t>(std::strlen(word));
  int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
  bool done = fd >= 0 && write(fd, word, length) == length;
  const int err = errno;
  if (fd >= 0) close(fd);
  return done ? "" : path + ": " + std::strerror(err);
}

// The mount holding `path` (the last one over its device, as the kernel sees it), or none.
const MountEntry* MountOf(const std::vector<MountEntry>& mounts, const std::string& path) {
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return nullptr;
  const std::string device =
      std::to_string(major(st.st_dev)) + ":" + std::to_string(minor(st.st_dev));
  const MountEntry* found = nullptr;
  for (const MountEntry& m : mounts) {
    if (m.device == device) found = &m;
  }
  return found;
}

// Sets huge=advise on the tmpfs mounted at `mount_point`, keeping its other options.
std::string SetTmpfsHugeAdvise(const std::string& mount_point) {
  int fd = fspick(AT_FDCWD, mount_point.c_str(), FSPICK_CLOEXEC);
  if (fd < 0) return std::string("fspick: ") + std::strerror(errno);
  std::string why;
  if (fsconfig(fd, FSCONFIG_SET_STRING, "huge", "advise", 0) != 0 ||
      fsconfig(fd, FSCONFIG_CMD_RECONFIGURE, nullptr, nullptr, 0) != 0) {
    why = std::string("fsconfig: ") + std::strerror(errno);
  }
  close(fd);
  return why;
}

}  // namespace

std::string SelectedWord(std::string_view setting) {
  const size_t open = setting.find('['), close = setting.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "";
  return std::string(setting.substr(open + 1, close - open - 1));
}

bool TmpfsGivesHugePages(std::string_view super_options, std::string_view shmem_enabled) {
  if (shmem_enabled == "deny") return false;
  if (shmem_enabled == "force") return true;
  return GivesHugePages(OptionValue(super_options, "huge"));
}

bool MemfdGivesHugePages(std::string_view shmem_enabled, std::string_view shmem_enabled_2m) {
  if (shmem_enabled == "deny") return false;
  if (shmem_enabled == "force") return true;
  return GivesHugePages(shmem_enabled_2m.empty() || shmem_enabled_2m == "inherit"
                            ? shmem_enabled
                            : shmem_enabled_2m);
}

HugePages HugePagesForFile(const std::string& path, bool set) {
  const std::vector<MountEntry> mounts = ReadMountInfo();
  const MountEntry* mount = MountOf(mounts, path);
  if (!mount || mount->fs_type != "tmpfs") {
    return {false, path + " is not on a tmpfs that can be told to give huge pages"};
  }
  const std::string shmem = ThpSetting("shmem_enabled");
  const std::string where = "the tmpfs on " + mount->mount_point;
  if (TmpfsGivesHugePages(mount->super_options, shmem)) {
    return {true, where + " gives them (huge=" + OptionValue(mount->super_options, "huge") + ")"};
  }
  if (shmem == "deny") return {false, "shmem_enabled is deny"};
  if (!set) return {false, where + " has huge=never and huge_pages=leave"};
  if (std::string why = SetTmpfsHugeAdvise(mount->mount_point); !why.empty()) {
    return {false, where + " has huge=never and cannot be set to advise: " + why};
  }
  return {true, "set huge=advise on " + where +
                    ": only mappings that ask for huge pages get them (-o huge_pages=leave "
                    "leaves it alone)"};
}

HugePages HugePagesForMemfd(bool set) {
  const std::string shmem = ThpSetting("shmem_enabled");
  const std::string shmem_2m = ThpSetting("hugepages-2048kB/shmem_enabled");
  if (MemfdGivesHugePages(shmem, shmem_2m)) return {true, "shmem_enabled gives them"};
  if (shmem == "deny") return {false, "shmem_enabled is deny"};
  if (!set) return {false, "shmem_enabled is never and huge_pages=leave"};
  const std::string name = shmem_2m.empty() || shmem_2m == "inherit"
                               ? "shmem_enabled"
                               : "hugepages-2048kB/shmem_enabled";
  if (std::string why = SetThpSetting(name, "advise"); !why.empty()) {
    return {false, name + " is never and cannot be set to advise: " + why};
  }
  return {true, "set " + std::string(kThpDir) + name +
                    " to advise: only mappings that ask for huge pages get them (-o "
                    "huge_pages=leave leaves it alone)"};
}

}  // namespace ckptfs
