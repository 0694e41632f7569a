// Opening a file of the backing directory by its path, as the remote tier does with the paths it
// keeps (the upload log's, the local tier's): beneath the root, through no symbolic link.
#pragma once

#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

namespace ckptfs {

// The file `path` beneath directory `root`, opened with `flags` (O_CLOEXEC and O_NOFOLLOW added)
// and reached through no symbolic link, nor "..", nor a magic link; -1 with errno otherwise.
inline int OpenBeneath(int root, const std::string& path, int flags) {
  open_how how{};
  how.flags = static_cast<uint64_t>(flags | O_CLOEXEC | O_NOFOLLOW);
  how.resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS;
  return static_cast<int>(syscall(SYS_openat2, root, path.c_str(), &how, sizeof how));
}

}  // namespace ckptfs
