// Settings of one mount, parsed from the command line by fs/options.cc.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "core/base/commit_markers.h"

namespace ckptfs {

// kDefer: fsync seals the file and returns (ordering keeps the crash contract); kWait: fsync
// returns once the file and everything sealed before it are durable; kReplicated (with replicas):
// once they are in every partner's memory, or durable.
enum class FsyncMode { kWait, kDefer, kReplicated };
// How the flusher writes backing files: kAuto uses O_DIRECT for files of at least
// policy::kDirectFlushMinBytes when the backing filesystem takes it, else the page cache.
enum class FlushIo { kAuto, kDirect, kBuffered };
// What is checked against the checksums taken of the bytes in memory: nothing; every file version
// the flusher publishes, read back before it gets its name (so that no commit marker is ever
// published over a file that does not match); every file the mount serves reads of from the
// backing store, read whole and checked against its record before its first read is answered;
// or both.
enum class VerifyMode { kOff, kMarkers, kReads, kAll };
inline bool VerifiesMarkers(VerifyMode m) { return m == VerifyMode::kMarkers || m == VerifyMode::kAll; }
inline bool VerifiesReads(VerifyMode m) { return m == VerifyMode::kReads || m == VerifyMode::kAll; }

struct Config {
  std::string backing_dir;
  uint64_t cache_size = 0;  // Bytes of file data held in memory at most.
  bool prefault = true;     // Fault the whole cache in at mount, in the background.
  std::chrono::milliseconds flush_delay{300};  // Quiet time after a seal before flushing.
  FsyncMode fsync_mode = FsyncMode::kDefer;
  unsigned queue_depth = 64;
  FlushIo flush_io = FlushIo::kAuto;
  VerifyMode verify = VerifyMode::kOff;
  // Largest virtual chunk of zarr arrays served with a fine chunk grid; 0 turns that off.
  uint64_t zarr_chunk = 1ull << 20;
  // How long unmount keeps retrying failed flushes before it saves data to the rescue directory.
  std::chrono::milliseconds unmount_retry{10000};

  // The shared mode: mounts on several nodes over one backing directory (core/shared/membership,
  // core/shared/shared_commit).
  bool shared = false;
  std::string node;  // This mount's node name; empty: the host name (NodeNameOrHostName).
  // Base names of the files published only once every member has made durable what it sealed
  // before them.
  std::vector<std::string> commit_markers = policy::DefaultCommitMarkers();
  // A member whose beat counter stands still this long is dead (on the observer's clock).
  std::chrono::milliseconds member_timeout{10000};
  // How often the shared directory is read (acknowledgements, requests) and written.
  std::chrono::milliseconds poll_interval{100};
  // Replication, with shared (core/replication/replicator.h): how many partners hold each sealed
  // version in memory (0: none), the group secret's file, the address partners' replicas are
  // received on (empty: every interface, published as the host's first address), and how much
  // of the partners' replicas this member holds (0: a quarter of cache_size).
  int replicas = 0;
  std::string replication_secret = "/etc/ckptfs/replication.key";
  std::string replication_address;
  uint64_t replica_memory = 0;

  // The remote tier (core/remote/uploader.h): "s3://BUCKET/PREFIX" (empty: none), the endpoint
  // URL of an S3-compatible store (empty: AWS), the region (empty: from the AWS environment or
  // profile, else us-east-1), the part size of multipart uploads and the requests in flight.
  std::string remote;
  std::string remote_endpoint;
  std::string remote_region;
  uint64_t remote_part_size = 16ull << 20;
  unsigned remote_concurrency = 8;
  // With `remote`: the bytes the local tier (the backing directory) keeps of files on their way to
  // the store and files on the store; over it, files on the store are evicted, oldest checkpoints
  // first (core/remote/local_tier.h). 0: nothing is evicted.
  uint64_t local_size = 0;

  // Which worker of the mount this is (0: the first, or a mount without a supervisor): the inode
  // numbers and handles each worker makes are its own, so a worker never takes those of one it
  // replaced for its own (core/recovery/handoff.h).
  uint32_t worker = 0;
  // The cache's memory: a shared memory file of at least cache_size bytes that outlives the
  // worker (MakeArenaMemory; not owned), or -1 for private memory.
  int arena_fd = -1;
  // Made to recover the cache memory of an earlier mount whose daemon died
  // (core/filesystem/earlier_mount.h).
  bool recovers_earlier_mount = false;
};

// Whether the staging directory's handoff and spill files are the state this process takes over
// (from the worker before it, or from an earlier mount's memory), not leftovers to remove.
inline bool TakesOverStagedFiles(const Config& config) {
  return config.worker > 0 || config.recovers_earlier_mount;
}

// Smallest cache_size accepted: a few maximal FUSE writes must fit at once.
inline constexpr uint64_t kMinCacheSize = 16ull << 20;

}  // namespace ckptfs
