// How files are served: which reads skip the page cache, how far ahead the backing store is read,
// how long opens wait for passthrough readers, when the cache is prefaulted, how long a serving
// thread polls for the next request. Constants of the read path, in one place so that their
// tests and users agree.
#pragma once

#include <chrono>
#include <cstdint>

namespace ckptfs::policy {

// Smallest file whose read-only opens skip the page cache (passthrough or direct reads) when
// the backing store holds it whole. Small files such as trackers are rewritten while being
// read, which passthrough would refuse, and are read many times over.
inline constexpr uint64_t kBackingReadMinBytes = 1ull << 20;
// Largest file whose read-only open fills the kernel's page cache with the whole file before the
// open returns (OpenFiles::SetPageCacheFiller), when the backing store holds it whole and nothing
// has it open: its reads, and those of later opens, are then served by the kernel alone.
inline constexpr uint64_t kPageCacheFillMaxBytes = 256ull << 10;
// How long an open for writing (or a truncate) waits for the file's passthrough readers to be
// released before it fails with ETXTBSY.
inline constexpr std::chrono::milliseconds kPassthroughReleaseWait{1000};
// How far ahead of a sequential direct reader the backing file is read into its page cache, so
// that each read request finds its data there (the kernel's own readahead for the backing file
// is its device's, often 128 KiB).
inline constexpr uint64_t kBackingReadAheadBytes = 16ull << 20;

// prefault=on faults the cache in only after the mount has had no file open for this long: a
// job's resume load right after mounting must not compete with it for memory, and training
// between checkpoints leaves the mount quiet for much longer.
inline constexpr std::chrono::seconds kPrefaultQuiet{10};

// How long the kernel may keep the attributes and the directory entry of a settled file
// (AttrSettled), instead of kAttrTimeout (core/tree/namespace.h).
inline constexpr std::chrono::seconds kSettledAttrTimeout{3600};

struct AttrFacts {
  bool shared = false;   // Config::shared: other mounts change the backing store.
  bool regular = false;  // A regular file.
  // A view of a zarr array (virtual chunk or served .zarray), or maybe a file of a zarr array
  // (in a directory that holds one, or named like a chunk): its name may come to mean another
  // file when the array takes a fine grid.
  bool zarr = false;
  bool durable = false;  // The backing store holds its newest version durably.
};

// Whether the kernel may keep a file's attributes and entry for kSettledAttrTimeout: only this
// mount changes it, and every change passes through the kernel, which drops what it kept. With
// the short timeout, a Python open/read/close of a small file loaded again after a second costs
// a LOOKUP more (4 requests instead of 3).
inline bool AttrSettled(const AttrFacts& f) {
  return !f.shared && f.regular && !f.zarr && f.durable;
}

// With the `request_poll` option, a serving thread polls /dev/fuse for the next request for a
// window before it reads (fs/request_poller.h): waking a sleeping thread on an idle CPU costs more
// than answering a small request, and small requests come in bursts (a loader's open, ioctl and
// release per file). The window is the option's maximum once a small request comes within that
// long of the one before; it halves (to nothing below kRequestPollMinWindow) for each that comes
// later, and is nothing after a large request (kRequestPollMaxBytes or more: a large write's
// copy costs more than a wakeup, and large writes are read by many threads at once).
inline constexpr std::chrono::nanoseconds kRequestPollMinWindow{10'000};
inline constexpr uint64_t kRequestPollMaxBytes = 64u << 10;

// The window after a request of `bytes` read `gap` after the one before, polling with `window`.
inline std::chrono::nanoseconds NextRequestPollWindow(std::chrono::nanoseconds window,
                                                      std::chrono::nanoseconds gap,
                                                      uint64_t bytes,
                                                      std::chrono::nanoseconds max) {
  if (max < kRequestPollMinWindow || bytes >= kRequestPollMaxBytes) return {};
  if (gap <= max) return max;
  const std::chrono::nanoseconds half = window / 2;
  return half < kRequestPollMinWindow ? std::chrono::nanoseconds{} : half;
}

// A poller's sched_yield that took longer than the window's maximum gave the CPU to another
// thread that wanted it (a rank, the flusher): polling there slows both, so nothing is polled for
// kRequestPollContendedPause after.
inline constexpr std::chrono::nanoseconds kRequestPollContendedPause{10'000'000};
inline bool RequestPollContended(std::chrono::nanoseconds yield_took,
                                 std::chrono::nanoseconds max) {
  return yield_took > max;
}

}  // namespace ckptfs::policy
