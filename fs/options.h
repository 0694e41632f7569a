// Command-line options of the ckptfs program.
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/config.h"
#include "core/base/status.h"

namespace ckptfs {

// Read requests are at most this many bytes unless max_read says otherwise. Replies read from
// the backing store are spliced (no copy through the daemon) when the reply and its header fit
// one pipe, 1 MiB at most without CAP_SYS_RESOURCE: hence half of that.
inline constexpr unsigned kDefaultMaxRead = 512u << 10;

// When read-only opens of large files on the backing store use FUSE passthrough
// (fs/session_hooks.h): kAuto when the daemon may (CAP_SYS_ADMIN) and the kernel offers it.
enum class Passthrough { kAuto, kOn, kOff };

// Whether requests come over FUSE over io_uring (fs/fuse_ring.h); kOn refuses to mount when the
// kernel does not offer it (the fuse module's enable_uring is off).
enum class IoUring { kOn, kOff };

// Where the cache's memory lives (core/memory/arena.h): memory the supervisor holds, or each
// worker's.
enum class CacheMemory { kShared, kPrivate };


struct MountOptions {
  Config config;
  std::string mountpoint;
  bool foreground = false;
  bool debug = false;  // -d: libfuse request tracing and log_level=debug; implies foreground.
  std::string log_level = "info";
  std::string log_file;  // Empty: stderr in the foreground, syslog as a daemon.
  std::vector<std::string> fuse_options;  // Passed to libfuse as one -o list.
  Passthrough passthrough = Passthrough::kAuto;
  IoUring io_uring = IoUring::kOff;
  // The longest a serving thread polls /dev/fuse for the next request (fs/request_poller.h).
  std::chrono::microseconds request_poll{400};
  CacheMemory cache_memory = CacheMemory::kShared;
  bool set_huge_pages = true;  // Turn the kernel's setting to advise (fs/huge_pages.h).
  unsigned max_read = kDefaultMaxRead;
  bool direct_read = true;  // Large files on the backing store are read past the page cache.
  // The Prometheus endpoint (fs/metrics_server.h): served on metrics_host:metrics_port when the
  // port is not 0; written to metrics_file every metrics_interval when it is not empty.
  std::string metrics_host = "127.0.0.1";
  uint16_t metrics_port = 0;
  std::string metrics_file;
  std::chrono::milliseconds metrics_interval{5000};
  std::vector<std::string> ignored_options;  // Generic mount(8) options FUSE has no use for.
};

// One mount option of ckptfs: its name, the form of its value, its default and meaning as the
// user reads them, and how it is applied (EINVAL with a reason when the value is malformed).
struct MountOption {
  const char* name;
  const char* values;  // "SIZE", "on|off", ...; empty for a flag, which takes no value.
  const char* default_text;
  const char* help;
  Status (*apply)(const std::string& value, MountOptions* out);
};

// Every mount option of ckptfs itself (not those passed on to FUSE).
std::span<const MountOption> MountOptionTable();

// Applies one `-o` list ("cache_size=8G,fsync=defer,allow_other") to `out`. Unknown or
// malformed options give EINVAL with a message naming the option. The generic options mount(8)
// and fstab pass to every filesystem are passed on to FUSE where it knows them (rw, dev, suid,
// exec, sync, ...) and ignored otherwise (defaults, auto, noauto, user, users, nouser, owner,
// group, _netdev, nofail, x-*, X-*, comment=*), as FUSE filesystems do.
Status ApplyMountOptions(const std::string& list, MountOptions* out);
// Options that need others: EINVAL with a message naming both (replicas without shared).
Status CheckOptionsTogether(const Config& config);

// The -o list the FUSE session is made with: ckptfs' own FUSE settings and the options passed
// on to FUSE. config.backing_dir must be absolute.
std::string FuseMountOptions(const MountOptions& o);

// The options for --help, one a line with their values and defaults.
std::string MountOptionsHelp();
// The options as README.md's Markdown table.
std::string MountOptionsMarkdown();

// "8G", "512M", "1048576", "64KiB" -> bytes.
Result<uint64_t> ParseSize(const std::string& text);
// "400us", "300ms", "2s", or digits alone counted in `bare_unit` -> microseconds.
Result<std::chrono::microseconds> ParseDuration(const std::string& text,
                                                std::chrono::microseconds bare_unit);

// The machine's physical memory in bytes; 0 when unknown.
uint64_t PhysicalMemory();
// What bounds the memory of the daemon, in bytes (0: unknown, or no limit): the machine's
// physical memory, and the memory limit of its cgroup (cgroup v2 memory.max of its cgroup and
// of every cgroup above it: a container's limit).
struct MemoryBounds {
  uint64_t physical = 0;
  uint64_t cgroup = 0;
};
MemoryBounds ReadMemoryBounds();
// The smaller of the known bounds; 0 when neither is known.
uint64_t UsableMemory(const MemoryBounds& bounds);
// The cgroup v2 path in the text of /proc/self/cgroup (its "0::PATH" line), or empty.
std::string CgroupV2Path(const std::string& proc_self_cgroup);
// The limit a memory.max file's text gives, in bytes; 0 for "max" (none) or a malformed text.
uint64_t ParseMemoryMax(const std::string& text);
// Default cache size: a quarter of the usable memory, at least kMinCacheSize.
uint64_t DefaultCacheSize();
// Ok when a cache of `cache_size` bytes fits in the usable memory of `bounds` (none known:
// anything fits); else EINVAL naming both sizes and which bound it is. Checked at mount: a larger
// cache, once full, would be swapped out or its daemon killed by the OOM killer.
Status CheckCacheSize(uint64_t cache_size, const MemoryBounds& bounds);

}  // namespace ckptfs
