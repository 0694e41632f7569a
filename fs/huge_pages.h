// Transparent huge pages for the cache's shared memory.
//
// The kernel gives huge pages to a MADV_HUGEPAGE mapping of shared memory only where its
// settings allow: a file of a tmpfs (the cache memory file in /dev/shm) when that tmpfs was
// mounted with huge=advise, within_size or always; a memfd when shmem_enabled (or the 2 MiB
// size's own shmem_enabled) says advise, within_size, always or force. Debian's and Ubuntu's
// defaults give neither: every 4 KiB a save writes into the cache is then a page fault of its
// own. With `huge_pages=set` (the default) a mount run as root turns such a setting to `advise`,
// which gives huge pages only to mappings that ask for them.
#pragma once

#include <string>
#include <string_view>

namespace ckptfs {

inline constexpr const char* kThpDir = "/sys/kernel/mm/transparent_hugepage/";

// The selected word of a kernel setting such as "always [advise] never", or "" when none is.
std::string SelectedWord(std::string_view setting);

// Whether a file of a tmpfs with filesystem options `super_options` gets huge pages in a
// MADV_HUGEPAGE mapping, under the selected word of shmem_enabled (`deny` and `force` override
// every tmpfs).
bool TmpfsGivesHugePages(std::string_view super_options, std::string_view shmem_enabled);

// Whether a memfd does, under the selected words of shmem_enabled and of the 2 MiB size's
// shmem_enabled ("" where the kernel has none, `inherit` to follow the first).
bool MemfdGivesHugePages(std::string_view shmem_enabled, std::string_view shmem_enabled_2m);

// What became of the huge pages of the cache's memory.
struct HugePages {
  bool given = false;  // The memory gets huge pages.
  std::string how;     // For the log: the setting that gives them, or what keeps them away.
};

// For the cache memory file `path` (a file of a tmpfs): whether its tmpfs gives huge pages;
// when not and `set`, sets huge=advise on that tmpfs (root only; other options unchanged).
HugePages HugePagesForFile(const std::string& path, bool set);

// For a memfd: whether shmem_enabled gives huge pages; when not and `set`, writes `advise` to
// the setting that decides (root only; `deny` is left alone).
HugePages HugePagesForMemfd(bool set);

}  // namespace ckptfs
