// How files are served: which reads skip the page cache, how far ahead the backing store is read,
// how long opens wait for passthrough readers, when the cache is prefaulted. Constants of the
// read path, in one place so that their tests and users agree.
#pragma once

#include <chrono>
#include <cstdint>

namespace ckptfs::policy {

// Smallest file whose read-only opens skip the page cache (passthrough or direct reads) when
// the backing store holds it whole. Small files such as trackers are rewritten while being
// read, which passthrough would refuse, and are read many times over.
inline constexpr uint64_t kBackingReadMinBytes = 1ull << 20;
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

}  // namespace ckptfs::policy
