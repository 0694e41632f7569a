#include "fs/options.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <climits>
#include <fstream>
#include <iterator>
#include <sstream>
#include <type_traits>

#include "core/remote/s3_location.h"
#include "core/replication/replication_policy.h"
#include "core/shared/shared_policy.h"
#include "fs/status_view.h"

namespace ckptfs {
namespace {

Status Bad(const std::string& option, const std::string& why) {
  return Status::Error(EINVAL, "bad option '" + option + "': " + why);
}

// Sets *field to the choice named `value`; EINVAL naming the choices when there is none.
template <typename T>
Status Choose(const std::string& value, std::initializer_list<std::pair<const char*, T>> choices,
              T* field) {
  for (const auto& [name, choice] : choices) {
    if (value == name) {
      *field = choice;
      return Status::Ok();
    }
  }
  std::string names;
  for (const auto& [name, choice] : choices) names += (names.empty() ? "" : ", ") + std::string(name);
  return Status::Error(EINVAL, "expected one of " + names);
}

Status OnOff(const std::string& value, bool* field) {
  return Choose<bool>(value, {{"on", true}, {"off", false}}, field);
}

// Parses a size within [min, max] into *field.
template <typename T>
Status SizeIn(const std::string& value, uint64_t min, uint64_t max, T* field) {
  Result<uint64_t> size = ParseSize(value);
  if (!size.ok() || *size < min || *size > max) return Status::Error(EINVAL, "out of range");
  *field = static_cast<T>(*size);
  return Status::Ok();
}

// Parses a duration into *field, which must hold it whole; digits alone count in its unit
// (milliseconds or microseconds).
template <typename D>
Status Duration(const std::string& value, D* field) {
  constexpr bool kMicroseconds = std::is_same_v<D, std::chrono::microseconds>;
  Result<std::chrono::microseconds> d = ParseDuration(value, D(1));
  if (!d.ok() || *d % D(1) != D::zero()) {
    return Status::Error(EINVAL, kMicroseconds
                                     ? "expected microseconds, or a number with us, ms or s"
                                     : "expected milliseconds, or a number with ms or s");
  }
  *field = std::chrono::duration_cast<D>(*d);
  return Status::Ok();
}

// Parses a duration within [min, max] into *field.
template <typename D>
Status DurationIn(const std::string& value, std::type_identity_t<D> min,
                  std::type_identity_t<D> max, D* field) {
  D d{};
  if (Status st = Duration(value, &d); !st.ok()) return st;
  if (d < min || d > max) return Status::Error(EINVAL, "out of range");
  *field = d;
  return Status::Ok();
}

// Parses commit_markers: base names separated by ':' (',' separates the mount options).
Status MarkerNames(const std::string& value, std::vector<std::string>* field) {
  constexpr size_t kMaxMarkers = 64;
  std::vector<std::string> names;
  std::stringstream ss(value);
  std::string name;
  while (std::getline(ss, name, ':')) {
    if (name.empty() || name == "." || name == ".." || name.size() > NAME_MAX ||
        name.find('/') != std::string::npos || name.find('\0') != std::string::npos) {
      return Status::Error(EINVAL, "'" + name + "' is not a file name");
    }
    names.push_back(name);
  }
  if (names.empty() || names.size() > kMaxMarkers) {
    return Status::Error(EINVAL, "expected 1 to 64 file names");
  }
  *field = std::move(names);
  return Status::Ok();
}

constexpr uint64_t kNoLimit = UINT64_MAX;

// Parses the metrics endpoint "PORT", "HOST:PORT" or "[IPV6]:PORT" (HOST default loopback).
Status MetricsAddress(const std::string& value, MountOptions* o) {
  std::string host = "127.0.0.1", port = value;
  if (size_t colon = value.rfind(':'); colon != std::string::npos) {
    host = value.substr(0, colon);
    port = value.substr(colon + 1);
    if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
      host = host.substr(1, host.size() - 2);
      if (host.empty() || host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string::npos) {
        return Status::Error(EINVAL, "not an IPv6 address");
      }
    } else if (host.empty() || host.size() > 253 ||
               host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                                      "0123456789.-") != std::string::npos) {
      return Status::Error(EINVAL, "not a host name or address");
    }
  }
  unsigned number = 0;
  const char* end = port.data() + port.size();
  auto [parsed_to, error] = std::from_chars(port.data(), end, number);
  if (error != std::errc() || parsed_to != end || number < 1 || number > 65535) {
    return Status::Error(EINVAL, "expected a port number 1-65535");
  }
  o->metrics_host = host;
  o->metrics_port = static_cast<uint16_t>(number);
  return Status::Ok();
}

// The mount options of ckptfs itself: what the parser accepts, what --help prints and what
// README.md's option table shows (tests/unit/options_test.cc keeps the README in step).
const MountOption kMountOptions[] = {
    {"cache_size", "SIZE", "a quarter of RAM (of the cgroup's limit when smaller)",
     "memory for file data, bytes with K/M/G/T suffix, at least 16M and at most the "
     "machine's physical memory and the memory limit of the daemon's cgroup (cgroup v2 "
     "memory.max, a container's limit)",
     [](const std::string& v, MountOptions* o) {
       return SizeIn(v, kMinCacheSize, kNoLimit, &o->config.cache_size);
     }},
    {"cache_memory", "shared|private", "shared",
     "`shared`: the cache lives in memory the supervisor holds (a file in /dev/shm, or a memfd "
     "where /dev/shm has no room for it), so a worker that dies or is upgraded hands everything "
     "to the next one, and a mount whose whole daemon died leaves it to the next mount. "
     "`private`: in each worker's own memory: an upgrade first writes the unsealed bytes of open "
     "files to the staging directory (6 GiB open: trainers wait 15.2 s against 0.28 s), and a "
     "worker's death ends the mount (what was not durable is lost; nothing after it is "
     "published)",
     [](const std::string& v, MountOptions* o) {
       return Choose<CacheMemory>(
           v, {{"shared", CacheMemory::kShared}, {"private", CacheMemory::kPrivate}},
           &o->cache_memory);
     }},
    {"huge_pages", "set|leave", "set",
     "`set`: when the kernel would give the cache's shared memory small pages (the tmpfs of "
     "/dev/shm without `huge=`, or `shmem_enabled` of transparent huge pages `never`), a mount "
     "run as root sets that to `advise`, which gives huge pages only to mappings that ask for "
     "them (logged); small pages cost the daemon more CPU per byte saved. `leave`: never touch "
     "the kernel's settings",
     [](const std::string& v, MountOptions* o) {
       return Choose<bool>(v, {{"set", true}, {"leave", false}}, &o->set_huge_pages);
     }},
    {"prefault", "on|off", "on",
     "`on`: take the whole `cache_size` from the system at mount, and fault it in on a "
     "background thread of idle priority once the mount has had no file open for 10 s (a resume "
     "load right after mounting goes first; training between checkpoints leaves the mount "
     "quiet), pausing whenever a file is open, so that the first checkpoint of a job is written "
     "into memory at the speed of later ones instead of paying the kernel's first-touch faults "
     "(`stats`: `memory_prefaulted`). It stops early when the system's available memory falls "
     "below an eighth of its total. Prefault or not, the memory the cache holds and no file uses "
     "goes back to the system (in whole 2 MiB runs) whenever less than an eighth of the system's "
     "memory is available, looked at every 250 ms (`memory_given_back`): the cache takes memory "
     "ahead of use only while the system has plenty. `off`: the cache takes memory as it first "
     "needs it",
     [](const std::string& v, MountOptions* o) { return OnOff(v, &o->config.prefault); }},
    {"flush_delay", "MS", "300ms",
     "quiet time after a file is sealed before it is flushed (`ms` or `s` suffix); a file sealed "
     "again within twice its wait is being rewritten and waits twice as long, up to 16x",
     [](const std::string& v, MountOptions* o) { return Duration(v, &o->config.flush_delay); }},
    {"fsync", "defer|wait|replicated", "defer",
     "`defer`: fsync seals the file and returns at once; the close order is kept, so the crash "
     "contract holds (see \"What fsync promises\"). `wait`: fsync returns when the file and "
     "everything sealed before it are durable. `replicated` (needs `replicas`): when they are in "
     "every partner's memory, or durable",
     [](const std::string& v, MountOptions* o) {
       return Choose<FsyncMode>(v,
                                {{"defer", FsyncMode::kDefer},
                                 {"wait", FsyncMode::kWait},
                                 {"replicated", FsyncMode::kReplicated}},
                                &o->config.fsync_mode);
     }},
    {"queue_depth", "N", "64", "io_uring requests in flight (1–4096)",
     [](const std::string& v, MountOptions* o) {
       return SizeIn(v, 1, 4096, &o->config.queue_depth);
     }},
    {"flush_io", "auto|direct|buffered", "auto",
     "how backing files are written: `auto` uses O_DIRECT for files of 1 MiB or more (no copy "
     "into the backing store's page cache, which a checkpoint would fill; the written ranges are "
     "allocated first, so a full disk shows before any byte is written and the writes run in "
     "parallel) and the page cache for smaller ones; `direct` uses O_DIRECT for all; `buffered` "
     "for none. Without O_DIRECT support in the backing filesystem, `auto` writes through the "
     "page cache and `direct` is refused at mount",
     [](const std::string& v, MountOptions* o) {
       return Choose<FlushIo>(v,
                              {{"auto", FlushIo::kAuto}, {"direct", FlushIo::kDirect},
                               {"buffered", FlushIo::kBuffered}},
                              &o->config.flush_io);
     }},
    {"verify", "off|markers|reads|all", "off",
     "`markers`: every file version is read back from the backing store once it is written and "
     "synced, and checked against the checksum (CRC32C) taken of its bytes in memory, before it "
     "is published under its name; so no commit marker is ever published over a file that does "
     "not match. A version that does not match is not published: it is logged (`stats`: "
     "`checksum_mismatches`) and written again from memory, and until it matches, it and what was "
     "sealed after it wait as for any failed flush (`ckptfs sync` fails naming it). Files are "
     "read back past this machine's page cache (O_DIRECT: from the device, or from the server of "
     "a network filesystem), a batch's all at once; where the backing filesystem has no O_DIRECT, "
     "through the page cache (said in the log). `reads`: a file read through the mount (or "
     "through a tensor view) from the backing store is read whole and checked against its "
     "checksum record before the first read of its bytes is answered; a file that does not match "
     "fails every read with EIO (logged, `stats`: `read_mismatches`), one without a record is "
     "served unchecked (`read_files_unrecorded`); passthrough is off, so that every read reaches "
     "the daemon. `all`: `markers` and `reads`. `off`: checksums are kept with published files, "
     "not read back",
     [](const std::string& v, MountOptions* o) {
       return Choose<VerifyMode>(v,
                                 {{"off", VerifyMode::kOff}, {"markers", VerifyMode::kMarkers},
                                  {"reads", VerifyMode::kReads}, {"all", VerifyMode::kAll}},
                                 &o->config.verify);
     }},
    {"passthrough", "auto|on|off", "auto",
     "read-only opens of files of 1 MiB or more that the backing store holds whole are read by "
     "the kernel straight from the backing file (see above; 2 GiB: 0.57 s cold, 0.14 s warm, as "
     "the plain directory, against direct reads' 1.00 s and 0.68 s). `auto`: when the daemon has "
     "CAP_SYS_ADMIN and the kernel offers it; `on`: ask even without CAP_SYS_ADMIN (the kernel's "
     "refusal is logged once, and reads go through the daemon); `off`: never, so writers are "
     "never refused",
     [](const std::string& v, MountOptions* o) {
       return Choose<Passthrough>(v,
                                  {{"auto", Passthrough::kAuto}, {"on", Passthrough::kOn},
                                   {"off", Passthrough::kOff}},
                                  &o->passthrough);
     }},
    {"io_uring", "on|off", "off",
     "experimental, for measurements (scripts/bench/run --fuse-ring): `on` serves requests over "
     "FUSE over io_uring (Linux 6.14+, the fuse module's `enable_uring` on, else the mount is "
     "refused), one daemon thread pinned to each CPU. Measured here it serves a small file's "
     "open and read 1.74x as fast as /dev/fuse (`--fuse-ring`); upgrades and SIGHUP restarts are "
     "refused (a worker cannot hand its ring over), and when a worker dies the requests its ring "
     "had taken fail (ECANCELED here) and the next worker serves over /dev/fuse. `off`: "
     "/dev/fuse only",
     [](const std::string& v, MountOptions* o) {
       return Choose<IoUring>(v, {{"on", IoUring::kOn}, {"off", IoUring::kOff}}, &o->io_uring);
     }},
    {"request_poll", "US", "400",
     "the longest, in microseconds (0–2000), a daemon thread that has read a small request polls "
     "/dev/fuse for the next one before it sleeps, one thread at a time, the others waiting for "
     "their turn instead of sleeping in the kernel (which wakes one of them for each request); so "
     "a burst of small requests is read without waking a thread on an idle CPU. The window is the "
     "maximum while small requests come within it of each other, halves for each that comes "
     "later, and is nothing after a request of 64 KiB or more (`stats`: `worker` "
     "`requests_caught_polling`). It polls only on a CPU no other thread wants: not while the "
     "flusher applies a batch, and not for 10 ms after a poll gave its CPU to another thread "
     "(`request_polls_contended`). Measured with the bench (3 runs, against the same build "
     "without): `small`'s load 0.76x as long warm, 0.81x after `drop_caches`, `dcp_small`'s save "
     "0.93x; `small`'s save 1.10x as long. `0`: never polls",
     [](const std::string& v, MountOptions* o) {
       return DurationIn(v, std::chrono::microseconds(0), std::chrono::microseconds(2000),
                         &o->request_poll);
     }},
    {"max_read", "SIZE", "512K",
     "largest read request the kernel sends (4K–1M). Up to 512K, data read from the backing "
     "store is spliced from its files into the kernel (no copy through the daemon); a larger "
     "reply does not fit the 1 MiB pipe an unprivileged process may have, and is copied",
     [](const std::string& v, MountOptions* o) {
       return SizeIn(v, 4096, 1u << 20, &o->max_read);
     }},
    {"direct_read", "on|off", "on",
     "without passthrough, `on`: read-only opens of files of 1 MiB or more that the backing "
     "store holds whole bypass the page cache (see above): first reads on a mount are faster and "
     "the data is not cached twice, re-reads on the same mount are slower. `off`: everything is "
     "read through the page cache",
     [](const std::string& v, MountOptions* o) { return OnOff(v, &o->direct_read); }},
    {"zarr_chunk", "SIZE", "1M",
     "largest chunk of the fine grid served for big uncompressed zarr arrays (64K–4M); `0` turns "
     "it off",
     [](const std::string& v, MountOptions* o) {
       if (v == "0") {
         o->config.zarr_chunk = 0;
         return Status::Ok();
       }
       return SizeIn(v, 64u << 10, 4u << 20, &o->config.zarr_chunk);
     }},
    {"log_level", "LEVEL", "info", "trace, debug, info, warn, error, off",
     [](const std::string& v, MountOptions* o) {
       return Choose<std::string>(v,
                                  {{"trace", "trace"}, {"debug", "debug"}, {"info", "info"},
                                   {"warn", "warn"}, {"error", "error"}, {"off", "off"}},
                                  &o->log_level);
     }},
    {"log_file", "PATH", "", "log here; otherwise stderr with `-f`, syslog as a daemon",
     [](const std::string& v, MountOptions* o) {
       o->log_file = v;
       return Status::Ok();
     }},
    {"unmount_timeout", "MS", "10s",
     "how long unmount retries failed flushes before it rescues the data",
     [](const std::string& v, MountOptions* o) { return Duration(v, &o->config.unmount_retry); }},
    {"shared", "", "",
     "the backing directory is shared by mounts on several nodes, each with its own `node`: they "
     "announce themselves under `BACKING/.ckptfs/shared/` with heartbeats, and the files named "
     "in `commit_markers` are published only once every live member has made durable what it "
     "sealed before them. With `remote`: the mounts share the store instead (each its own local "
     "backing directory), meet under `PREFIX/.ckptfs/shared/` there, and a marker waits until "
     "every live member's earlier files are on the store (see \"Several nodes without a shared "
     "filesystem\")",
     [](const std::string&, MountOptions* o) {
       o->config.shared = true;
       return Status::Ok();
     }},
    {"node", "NAME", "the host name",
     "this mount's name among the members of a shared backing directory: 1–64 of `A-Z a-z 0-9 . "
     "_ -`, not starting with `.`; two mounts on one machine need different names",
     [](const std::string& v, MountOptions* o) {
       if (!policy::IsValidNodeName(v)) {
         return Status::Error(EINVAL, "not a valid node name (1-64 of A-Z a-z 0-9 . _ -, not "
                                      "starting with '.')");
       }
       o->config.node = v;
       return Status::Ok();
     }},
    {"commit_markers", "NAME:NAME...",
     ".metadata:metadata.json:latest_checkpointed_iteration.txt:latest_iteration.txt:"
     "dlrover_latest.txt",
     "with `shared`: the names of the files (in any directory) that commit a checkpoint, "
     "separated by `:` (`,` separates the options); by default the metadata and trackers of "
     "DCP, Megatron-core and DLRover",
     [](const std::string& v, MountOptions* o) {
       return MarkerNames(v, &o->config.commit_markers);
     }},
    {"member_timeout", "MS", "10s",
     "with `shared`: a member whose heartbeat counter has not changed for this long (1s–10min, "
     "on the observer's own clock) is dead, and the commits waiting for it fail unless it comes "
     "back within as long again",
     [](const std::string& v, MountOptions* o) {
       return DurationIn(v, std::chrono::seconds(1), std::chrono::minutes(10),
                         &o->config.member_timeout);
     }},
    {"poll_interval", "MS", "100ms",
     "with `shared`: how often a member reads the shared directory for commit requests and "
     "acknowledgements (10ms–10s)",
     [](const std::string& v, MountOptions* o) {
       return DurationIn(v, std::chrono::milliseconds(10), std::chrono::seconds(10),
                         &o->config.poll_interval);
     }},
    {"replicas", "N", "0",
     "with `shared`: each sealed file version is also sent, after its close, to the next N (0–2) "
     "live members in the ring of node names, which hold it in memory until this member has made "
     "it durable (the level `replicated` of `ckptfs status`; see \"Replicas in partners' "
     "memory\"); 0: none",
     [](const std::string& v, MountOptions* o) {
       if (v.size() != 1 || v[0] < '0' || v[0] > '0' + policy::kMaxReplicas) {
         return Status::Error(EINVAL, "must be 0, 1 or 2");
       }
       o->config.replicas = v[0] - '0';
       return Status::Ok();
     }},
    {"replication_secret", "PATH", "/etc/ckptfs/replication.key",
     "with `replicas`: the file holding the secret every member of the group shares (16–4096 "
     "bytes), owned by root or the daemon's user and readable by its owner only (mode 600); "
     "members prove it to each other with HMAC-SHA256 when they connect",
     [](const std::string& v, MountOptions* o) {
       o->config.replication_secret = v;
       return Status::Ok();
     }},
    {"replication_address", "ADDRESS", "every interface",
     "with `replicas`: the numeric IPv4 or IPv6 address partners' replicas are received on (a "
     "port the kernel chooses, published in the member file, so that mounts on one machine "
     "never collide); by default every interface, published as the host's first address",
     [](const std::string& v, MountOptions* o) {
       unsigned char buf[sizeof(in6_addr)];
       if (inet_pton(AF_INET, v.c_str(), buf) != 1 && inet_pton(AF_INET6, v.c_str(), buf) != 1) {
         return Status::Error(EINVAL, "not a numeric IPv4 or IPv6 address");
       }
       o->config.replication_address = v;
       return Status::Ok();
     }},
    {"replica_memory", "SIZE", "a quarter of cache_size",
     "with `replicas`: memory for the replicas of other members this member holds (16M or more); "
     "when it is full, their owners offer again later (back-pressure: no write fails)",
     [](const std::string& v, MountOptions* o) {
       return SizeIn(v, 16ull << 20, 1ull << 50, &o->config.replica_memory);
     }},
    {"remote", "s3://BUCKET/PREFIX", "",
     "the remote tier: every file version, once durable in the backing directory, is uploaded "
     "to this S3 bucket under PREFIX, in close order, commit markers (`commit_markers`) only "
     "after everything published before them is on the store (see \"The remote tier\"). "
     "Credentials as the AWS tools find them (`AWS_ACCESS_KEY_ID`/`AWS_SECRET_ACCESS_KEY`/"
     "`AWS_SESSION_TOKEN`, or `AWS_PROFILE` in `~/.aws/credentials` and `~/.aws/config`); the "
     "mount is refused, with one line saying why, when the bucket cannot be reached with them",
     [](const std::string& v, MountOptions* o) {
       Result<S3Location> location = S3Location::Parse(v);
       if (!location.ok()) return location.status();
       o->config.remote = v;
       return Status::Ok();
     }},
    {"remote_endpoint", "URL", "AWS",
     "with `remote`: the `http://` or `https://` URL of an S3-compatible store (MinIO, Ceph RGW, "
     "moto), addressed path-style; TLS certificates are verified",
     [](const std::string& v, MountOptions* o) {
       if (v.rfind("http://", 0) != 0 && v.rfind("https://", 0) != 0) {
         return Status::Error(EINVAL, "expected an http:// or https:// URL");
       }
       if (v.size() > 1024) return Status::Error(EINVAL, "longer than 1024 bytes");
       o->config.remote_endpoint = v;
       return Status::Ok();
     }},
    {"remote_region", "REGION", "AWS_REGION, the profile's, or us-east-1",
     "with `remote`: the region requests are signed for",
     [](const std::string& v, MountOptions* o) {
       if (v.empty() || v.size() > 64 ||
           v.find_first_not_of("abcdefghijklmnopqrstuvwxyz0123456789-") != std::string::npos) {
         return Status::Error(EINVAL, "expected a region name (a-z 0-9 -)");
       }
       o->config.remote_region = v;
       return Status::Ok();
     }},
    {"remote_part_size", "SIZE", "16M",
     "with `remote`: files up to this size are uploaded in one request, larger ones in parts of "
     "this size (5M–5G; larger when a file would need over 10,000 parts)",
     [](const std::string& v, MountOptions* o) {
       return SizeIn(v, 5ull << 20, 5ull << 30, &o->config.remote_part_size);
     }},
    {"remote_concurrency", "N", "8",
     "with `remote`: upload requests in flight (1–64), each on its own connection",
     [](const std::string& v, MountOptions* o) {
       return SizeIn(v, 1, 64, &o->config.remote_concurrency);
     }},
    {"local_size", "SIZE", "0 (never evict)",
     "with `remote`: the local tier is a cache of the store: once the files in the backing "
     "directory that are on their way to the store or on it hold more than SIZE, files already "
     "on the store are evicted from the backing directory, oldest checkpoints first (newest kept); "
     "they stay listed and are fetched again at their next open",
     [](const std::string& v, MountOptions* o) {
       return SizeIn(v, 1, 1ull << 60, &o->config.local_size);
     }},
    {"metrics", "[HOST:]PORT", "",
     "serve Prometheus metrics at `http://HOST:PORT/metrics` (see \"Metrics\"); HOST is "
     "`127.0.0.1` unless given (`0.0.0.0`: every interface, `[::1]`: IPv6)",
     MetricsAddress},
    {"metrics_file", "PATH", "",
     "write the same metrics to PATH every `metrics_interval`, replacing it atomically (for "
     "node_exporter's textfile collector: a `.prom` file in its directory)",
     [](const std::string& v, MountOptions* o) {
       if (v.front() != '/') return Status::Error(EINVAL, "expected an absolute path");
       o->metrics_file = v;
       return Status::Ok();
     }},
    {"metrics_interval", "MS", "5s", "how often `metrics_file` is written (100ms–10min)",
     [](const std::string& v, MountOptions* o) {
       return DurationIn(v, std::chrono::milliseconds(100), std::chrono::minutes(10),
                         &o->metrics_interval);
     }},
};

// libfuse mount options that ckptfs passes through unchanged.
const char* const kFuseFlags[] = {
    "allow_other", "allow_root", "auto_unmount", "default_permissions", "ro", "rw", "dev",
    "nodev", "suid", "nosuid", "exec", "noexec", "atime", "noatime", "relatime", "norelatime",
    "diratime", "nodiratime", "strictatime", "nostrictatime", "lazytime", "nolazytime", "sync",
    "async", "dirsync"};
const char* const kFuseValued[] = {"fsname", "subtype"};
// Generic mount(8) options that mean nothing to a FUSE mount: accepted and ignored.
const char* const kIgnoredFlags[] = {"defaults", "auto", "noauto", "user", "users", "nouser",
                                     "owner", "group", "_netdev", "nofail", "silent", "loud"};
const char* const kIgnoredPrefixes[] = {"x-", "X-", "comment="};

template <typename List>
bool Contains(const List& list, const std::string& name) {
  return std::find(std::begin(list), std::end(list), name) != std::end(list);
}

}  // namespace

Result<uint64_t> ParseSize(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == 0 || pos > 19) return Status::Error(EINVAL, "not a size");
  uint64_t value = std::stoull(text.substr(0, pos));
  std::string suffix = text.substr(pos);
  std::transform(suffix.begin(), suffix.end(), suffix.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  if (suffix.size() > 1 && (suffix.substr(1) == "IB" || suffix.substr(1) == "B")) {
    suffix = suffix.substr(0, 1);
  }
  unsigned shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K") {
    shift = 10;
  } else if (suffix == "M") {
    shift = 20;
  } else if (suffix == "G") {
    shift = 30;
  } else if (suffix == "T") {
    shift = 40;
  } else {
    return Status::Error(EINVAL, "unknown size suffix");
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) return Status::Error(ERANGE, "size too large");
  return value << shift;
}

Result<std::chrono::microseconds> ParseDuration(const std::string& text,
                                                std::chrono::microseconds bare_unit) {
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == 0 || pos > 9) return Status::Error(EINVAL, "not a duration");
  const int64_t value = std::stoll(text.substr(0, pos));
  const std::string unit = text.substr(pos);
  if (unit.empty()) return value * bare_unit;
  if (unit == "us") return std::chrono::microseconds(value);
  if (unit == "ms") return std::chrono::microseconds(std::chrono::milliseconds(value));
  if (unit == "s") return std::chrono::microseconds(std::chrono::seconds(value));
  return Status::Error(EINVAL, "unknown unit (use us, ms or s)");
}

uint64_t PhysicalMemory() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page : 0;
}

std::string CgroupV2Path(const std::string& proc_self_cgroup) {
  std::istringstream lines(proc_self_cgroup);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("0::/", 0) == 0) return line.substr(3);
  }
  return {};
}

uint64_t ParseMemoryMax(const std::string& text) {
  const std::string value = text.substr(0, text.find_first_of(" \n"));
  uint64_t bytes = 0;
  const auto [end, error] = std::from_chars(value.data(), value.data() + value.size(), bytes);
  return error == std::errc() && end == value.data() + value.size() ? bytes : 0;
}

MemoryBounds ReadMemoryBounds() {
  MemoryBounds bounds{.physical = PhysicalMemory()};
  std::ifstream self("/proc/self/cgroup");
  std::string path = CgroupV2Path(std::string(std::istreambuf_iterator<char>(self), {}));
  if (path.empty()) return bounds;
  // The cgroup's own limit and those above it (its container's): the smallest holds.
  while (true) {
    std::ifstream max("/sys/fs/cgroup" + (path == "/" ? std::string() : path) + "/memory.max");
    std::string text;
    if (max && std::getline(max, text)) {
      const uint64_t limit = ParseMemoryMax(text);
      if (limit > 0 && (bounds.cgroup == 0 || limit < bounds.cgroup)) bounds.cgroup = limit;
    }
    if (path == "/") return bounds;
    const size_t slash = path.rfind('/');
    path = slash == 0 ? "/" : path.substr(0, slash);
  }
}

uint64_t UsableMemory(const MemoryBounds& bounds) {
  if (bounds.physical == 0 || bounds.cgroup == 0) return std::max(bounds.physical, bounds.cgroup);
  return std::min(bounds.physical, bounds.cgroup);
}

uint64_t DefaultCacheSize() {
  uint64_t total = UsableMemory(ReadMemoryBounds());
  if (total == 0) total = 4ull << 30;
  return std::max<uint64_t>(total / 4, kMinCacheSize);
}

Status CheckCacheSize(uint64_t cache_size, const MemoryBounds& bounds) {
  const uint64_t usable = UsableMemory(bounds);
  if (usable == 0 || cache_size <= usable) return Status::Ok();
  const std::string what = usable == bounds.physical
                               ? "this machine's physical memory ("
                               : "the memory limit of this daemon's cgroup (memory.max: ";
  return Status::Error(EINVAL, "cache_size " + HumanBytes(static_cast<double>(cache_size)) +
                                   " is larger than " + what +
                                   HumanBytes(static_cast<double>(usable)) + ")");
}

std::span<const MountOption> MountOptionTable() { return kMountOptions; }

Status CheckOptionsTogether(const Config& config) {
  if (config.replicas > 0 && !config.shared) {
    return Status::Error(EINVAL, "replicas=" + std::to_string(config.replicas) +
                                     " needs -o shared: replicas are held by the other members of "
                                     "a shared backing directory");
  }
  if (config.replicas > 0 && !config.remote.empty()) {
    return Status::Error(EINVAL, "replicas=" + std::to_string(config.replicas) +
                                     " with -o remote is not supported: a partner completes a "
                                     "dead member's part on its own backing directory, which "
                                     "is not the store the others wait for");
  }
  if (config.fsync_mode == FsyncMode::kReplicated && config.replicas == 0) {
    return Status::Error(EINVAL, "fsync=replicated needs -o replicas=1 or 2: without partners "
                                 "nothing is replicated (fsync=wait waits for the backing store)");
  }
  if (config.local_size > 0 && config.remote.empty()) {
    return Status::Error(EINVAL, "local_size needs -o remote: only files on the store are "
                                 "evicted from the backing directory");
  }
  return Status::Ok();
}

Status ApplyMountOptions(const std::string& list, MountOptions* out) {
  std::stringstream ss(list);
  std::string option;
  while (std::getline(ss, option, ',')) {
    if (option.empty()) continue;
    size_t eq = option.find('=');
    std::string key = option.substr(0, eq);
    bool has_value = eq != std::string::npos;
    std::string value = has_value ? option.substr(eq + 1) : "";
    const auto spec = std::find_if(std::begin(kMountOptions), std::end(kMountOptions),
                                   [&](const MountOption& o) { return key == o.name; });
    if (spec != std::end(kMountOptions) && !*spec->values) {
      if (has_value) return Bad(option, "takes no value");
      if (Status st = spec->apply(value, out); !st.ok()) return Bad(option, st.message());
    } else if (spec != std::end(kMountOptions)) {
      if (value.empty()) return Bad(option, "needs a value (" + key + "=" + spec->values + ")");
      if (Status st = spec->apply(value, out); !st.ok()) {
        return Bad(option, st.message() + " (" + key + "=" + spec->values + ")");
      }
    } else if ((Contains(kFuseFlags, key) && !has_value) ||
               (Contains(kFuseValued, key) && has_value)) {
      out->fuse_options.push_back(option);
    } else if ((Contains(kIgnoredFlags, key) && !has_value) ||
               std::any_of(std::begin(kIgnoredPrefixes), std::end(kIgnoredPrefixes),
                           [&](const char* prefix) { return option.starts_with(prefix); })) {
      out->ignored_options.push_back(option);
    } else {
      return Bad(option, "unknown option");
    }
  }
  return Status::Ok();
}

std::string MountOptionsHelp() {
  std::string out = "Mount options (-o NAME=VALUE,...):\n";
  for (const MountOption& o : kMountOptions) {
    out += "  " + std::string(o.name) + (*o.values ? "=" + std::string(o.values) : "");
    if (*o.default_text) out += "  (default " + std::string(o.default_text) + ")";
    out += "\n";
  }
  out += "  and the FUSE options allow_other, allow_root, auto_unmount, default_permissions, "
         "fsname=, subtype=, ro, noatime, ...;\n  the generic options of mount(8) and fstab "
         "(_netdev, nofail, x-systemd.*, ...) are ignored.\nREADME.md explains each.";
  return out;
}

std::string MountOptionsMarkdown() {
  auto escape = [](std::string s) {
    for (size_t i = 0; (i = s.find('|', i)) != std::string::npos; i += 2) s.insert(i, "\\");
    return s;
  };
  std::string out = "| option | meaning | default |\n| --- | --- | --- |\n";
  for (const MountOption& o : kMountOptions) {
    std::string default_cell = *o.default_text ? " " + std::string(o.default_text) + " |" : " |";
    std::string form = *o.values ? std::string(o.name) + "=" + o.values : std::string(o.name);
    out += "| `" + escape(form) + "` | " + escape(o.help) + " |" + default_cell + "\n";
  }
  out += "| `allow_other`, `allow_root`, `auto_unmount`, `default_permissions`, `fsname=`, "
         "`subtype=`, `ro`, `noatime`, ... | passed to FUSE; `default_permissions` is always on "
         "| |\n"
         "| `defaults`, `auto`, `noauto`, `user`, `users`, `nouser`, `owner`, `group`, "
         "`_netdev`, `nofail`, `x-*`, `comment=` | generic options of mount(8) and fstab: "
         "ignored | |\n";
  return out;
}

std::string FuseMountOptions(const MountOptions& o) {
  std::string opts = "default_permissions,fsname=ckptfs:" + o.config.backing_dir +
                     ",subtype=ckptfs,max_read=" + std::to_string(o.max_read);
  for (const std::string& opt : o.fuse_options) opts += "," + opt;
  return opts;
}

}  // namespace ckptfs
