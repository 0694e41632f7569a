// Settings of one mount, parsed from the command line by fs/options.cc.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ckptfs {

// kDefer: fsync seals the file and returns (ordering keeps the crash contract); kWait: fsync
// returns once the file and everything sealed before it are durable.
enum class FsyncMode { kWait, kDefer };
// How the flusher writes backing files: kAuto uses O_DIRECT for files of at least
// policy::kDirectFlushMinBytes when the backing filesystem takes it, else the page cache.
enum class FlushIo { kAuto, kDirect, kBuffered };

struct Config {
  std::string backing_dir;
  uint64_t cache_size = 0;  // Bytes of file data held in memory at most.
  bool prefault = false;    // Fault the whole cache in at mount, in the background.
  std::chrono::milliseconds flush_delay{300};  // Quiet time after a seal before flushing.
  FsyncMode fsync_mode = FsyncMode::kDefer;
  unsigned queue_depth = 64;
  FlushIo flush_io = FlushIo::kAuto;
  // Largest virtual chunk of zarr arrays served with a fine chunk grid; 0 turns that off.
  uint64_t zarr_chunk = 1ull << 20;
  // How long unmount keeps retrying failed flushes before it saves data to the rescue directory.
  std::chrono::milliseconds unmount_retry{10000};
};

// Smallest cache_size accepted: a few maximal FUSE writes must fit at once.
inline constexpr uint64_t kMinCacheSize = 16ull << 20;

}  // namespace ckptfs
