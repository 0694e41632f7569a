// How the kernel serves an open of a regular file, decided from what the open asks and what the
// file is: through its page cache; direct (every read and write of the handle comes to the
// daemon); or by FUSE passthrough (the kernel reads the backing file itself). A pure function,
// tested on its own; Filesystem gathers the facts and carries the choice out.
#pragma once

#include <fcntl.h>

#include <algorithm>
#include <cstdint>
#include <string_view>

#include "core/base/serve_policy.h"

namespace ckptfs::policy {

struct OpenFacts {
  bool may_bypass = false;  // The open may skip the page cache (not a virtual zarr chunk).
  int access = O_RDONLY;    // The open's O_ACCMODE bits.
  uint64_t size = 0;
  // Every byte is in the file's own backing file (none in memory, none in a spill file).
  bool whole_on_backing = false;
  bool prefetched = false;          // An earlier open had the backing file read ahead.
  bool passthrough_on = false;      // The mount uses passthrough (Filesystem::SetPassthrough).
  bool passthrough_readers = false; // Handles read the file by passthrough now.
  bool open = false;                // Any handle has the file open.
  bool cached_open = false;         // A handle that uses the page cache has the file open.
  bool direct_reads = false;        // Filesystem::EnableDirectReads.
  bool fill_on = false;             // The mount fills page caches (SetPageCacheFiller).
  bool filled = false;  // An open filled the kernel's page cache with this version already.
  bool page_cache_stale = false;    // Inode::page_cache_stale.
  // The opener writes from memory it shares copy-on-write with another process
  // (WritesFromForkedMemory): a direct write would have the kernel unshare (copy) each page of
  // the buffer before it hands it over, a copy through the page cache reads the shared pages.
  bool writer_memory_forked = false;
  // The last file of this name closed on this mount was written in small pieces
  // (WroteInSmallPieces), as the next checkpoint's file of the same name most likely is.
  bool small_writes_before = false;
};

struct OpenChoice {
  // Read-only opens of files the backing store holds whole: large ones skip the page cache
  // (passthrough, or direct reads); small ones have the backing file read ahead, once, while the
  // reader's requests travel.
  bool prefetch = false;
  // The first reader of a large file registers the backing file for passthrough; readers that
  // come while it is registered share it (the caller sees the registered id).
  bool register_passthrough = false;
  // Without passthrough: direct when no cached handle has the file open, for a write-only open
  // (the writer never reads back; each byte is copied once less) unless its writer's memory is
  // forked and the file is not one written in small pieces (a small direct write unshares a page
  // or two; through the page cache, each unaligned one costs two requests and a copy), or a
  // large read-only one with direct reads on; else the page cache.
  bool direct = false;
  // A small file the backing store holds whole, which nothing has open and whose cached pages
  // are right: the open fills the kernel's page cache with the whole file before it returns
  // (instead of having it read ahead), once per version and lookup.
  bool fill_page_cache = false;
};

inline OpenChoice ChooseOpen(const OpenFacts& f) {
  OpenChoice choice;
  const bool read_only = f.access == O_RDONLY;
  const bool held_by_backing =
      f.may_bypass && read_only && f.whole_on_backing && f.size >= kBackingReadMinBytes;
  choice.fill_page_cache = f.may_bypass && read_only && f.whole_on_backing && f.size > 0 &&
                           f.size <= kPageCacheFillMaxBytes && f.fill_on && !f.open &&
                           !f.filled && !f.page_cache_stale;
  choice.prefetch = f.may_bypass && read_only && f.whole_on_backing && !held_by_backing &&
                    f.size > 0 && !f.prefetched && !choice.fill_page_cache;
  choice.register_passthrough =
      held_by_backing && f.passthrough_on && !f.passthrough_readers && !f.open;
  choice.direct = f.may_bypass && !f.cached_open &&
                  ((f.access == O_WRONLY && (!f.writer_memory_forked || f.small_writes_before)) ||
                   (held_by_backing && f.direct_reads));
  return choice;
}

// A handle wrote its file in small pieces when it sent at least kSmallWritesMinRequests write
// requests of fewer than kSmallWriteMaxBytes on average: a writer that flushes after each small
// record, as DCP does after each tensor. Around 64 KiB, a request's round trip costs about as
// much as copying its bytes once more.
inline constexpr uint64_t kSmallWritesMinRequests = 64;
inline constexpr uint64_t kSmallWriteMaxBytes = 64ull << 10;

inline bool WroteInSmallPieces(uint64_t requests, uint64_t bytes) {
  return requests >= kSmallWritesMinRequests && bytes < requests * kSmallWriteMaxBytes;
}

// What /proc tells of the process behind a write-only open.
struct WriterProcess {
  // It was forked and did not exec since: its executable and command line are its parent's.
  bool forked_without_exec = false;
  // Its parent is a fork server (IsForkServer): the writer built its state after the fork, and
  // what it shares with the server is the server's modules, not the bytes it writes.
  bool parent_is_fork_server = false;
  uint64_t anon_bytes = 0;         // Its anonymous memory mapped (RssAnon), shared or not.
  uint64_t parent_anon_bytes = 0;  // Its parent's.
};

// Whether a process is a fork server, from its command line (/proc/PID/cmdline: NUL-separated
// arguments) and its parent's: Python multiprocessing's forkserver (which torch.multiprocessing
// and launchers use to start workers), exec'd by its parent (its children carry the same command
// line, and are not servers).
inline bool IsForkServer(std::string_view cmdline, std::string_view parent_cmdline) {
  constexpr std::string_view kServerMain = "from multiprocessing.forkserver import main;";
  if (cmdline == parent_cmdline) return false;
  for (size_t at = 0; at < cmdline.size();) {
    const size_t end = std::min(cmdline.find('\0', at), cmdline.size());
    if (cmdline.substr(at, end - at).starts_with(kServerMain)) return true;
    at = end + 1;
  }
  return false;
}

// A writer this small writes from memory of its own whatever it shares.
inline constexpr uint64_t kForkedWriterMinAnonBytes = 64ull << 20;

// Whether the writer most likely writes from pages it shares copy-on-write with its parent, as
// the processes Megatron-core's torch_dist writer forks for each save do: forked without exec
// from a parent that holds at least half as much anonymous memory as it maps, and is no fork
// server (a fork server's children, such as ranks started by one, write what they built).
inline bool WritesFromForkedMemory(const WriterProcess& p) {
  return p.forked_without_exec && !p.parent_is_fork_server &&
         p.anon_bytes >= kForkedWriterMinAnonBytes &&
         p.parent_anon_bytes * 2 >= p.anon_bytes;
}

}  // namespace ckptfs::policy
