// ckptfs: mount a checkpoint filesystem over a backing directory, or talk to a running mount.
#include <fcntl.h>
#include <malloc.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/backing/backing_store.h"
#include "core/filesystem/earlier_mount.h"
#include "core/memory/arena.h"
#include "core/recovery/cache_memory_layout.h"
#include "core/remote/remote_settings.h"
#include "core/replication/member_auth.h"
#include "core/shared/membership.h"
#include "fs/cache_memory_file.h"
#include "fs/client.h"
#include "fs/fuse_adapter.h"
#include "fs/fuse_ring.h"
#include "fs/huge_pages.h"
#include "fs/metrics_server.h"
#include "fs/mount_info.h"
#include "fs/options.h"
#include "fs/session_hooks.h"
#include "fs/supervisor.h"
#include "fs/verify_command.h"
#include "fs/worker.h"
#include "iouring/env.h"

namespace ckptfs {
namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "ckptfs: %s\n", message.c_str());
  return 1;
}

std::string RealPath(const std::string& path) {
  char buf[PATH_MAX];
  return realpath(path.c_str(), buf) ? std::string(buf) : std::string();
}

// Checks the mount point: an existing directory, not already a mount point, outside the backing
// directory. Returns an empty string when it is fine, else why not.
std::string CheckMountpoint(const std::string& mountpoint, const std::string& backing) {
  struct stat st {}, parent {};
  if (stat(mountpoint.c_str(), &st) != 0) {
    if (errno == ENOTCONN) {
      return "mount point " + mountpoint + ": " + std::strerror(errno) +
             " (the daemon of the mount there died: unmount it with fusermount3 -u, then mount "
             "again: what it had not made durable is recovered)";
    }
    return "mount point " + mountpoint + ": " + std::strerror(errno);
  }
  if (!S_ISDIR(st.st_mode)) return "mount point " + mountpoint + " is not a directory";
  if (stat((mountpoint + "/..").c_str(), &parent) == 0 &&
      (st.st_dev != parent.st_dev || st.st_ino == parent.st_ino)) {
    return "mount point " + mountpoint + " is already a mount point";
  }
  std::string m = RealPath(mountpoint), b = RealPath(backing);
  if (!b.empty() && (m == b || m.rfind(b + "/", 0) == 0 || b.rfind(m + "/", 0) == 0)) {
    return "mount point " + mountpoint + " and backing directory " + backing + " overlap";
  }
  return "";
}

// The "major:minor" of the filesystem mounted on `mountpoint` (an absolute path without
// symlinks); the last entry wins, as in the kernel. Empty if none.
std::string MountDevice(const std::string& mountpoint) {
  std::string device;
  for (const MountEntry& m : ReadMountInfo()) {
    if (m.mount_point == mountpoint) device = m.device;
  }
  return device;
}

// Raises the mount's readahead to kReadAheadBytes; needs root, else reads keep the default.
void RaiseReadAhead(const std::string& mountpoint) {
  std::string device = MountDevice(RealPath(mountpoint));
  if (device.empty()) {
    spdlog::info("readahead stays at the kernel's default: {} is not in /proc/self/mountinfo",
                 mountpoint);
    return;
  }
  std::string knob = "/sys/class/bdi/" + device + "/read_ahead_kb";
  std::FILE* f = std::fopen(knob.c_str(), "we");
  bool done = f && std::fprintf(f, "%u\n", kReadAheadBytes >> 10) > 0;
  if (f && std::fclose(f) != 0) done = false;
  if (done) {
    spdlog::debug("readahead {} KiB ({})", kReadAheadBytes >> 10, knob);
  } else {
    spdlog::info("readahead stays at the kernel's default: cannot set {}: {}", knob,
                 std::strerror(errno));
  }
}

void SetUpLogging(const MountOptions& o, bool daemon) {
  std::shared_ptr<spdlog::logger> logger;
  if (!o.log_file.empty()) {
    logger = spdlog::basic_logger_mt("ckptfs", o.log_file);
  } else if (daemon) {
    logger = spdlog::syslog_logger_mt("ckptfs", "ckptfs", LOG_PID);
  } else {
    logger = spdlog::stderr_color_mt("ckptfs");
  }
  logger->set_level(spdlog::level::from_str(o.debug ? "debug" : o.log_level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);
}

// This binary as a path a worker can be started from (the file there may be replaced by then,
// which is how an upgrade to the same path works).
std::string SelfBinary() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return "";
  buf[n] = '\0';
  return buf;
}

// Detaches into the background: the parent returns the daemon's verdict (a line on the pipe:
// "ok", or "error MESSAGE", printed) as its exit status; the child, a session leader with its
// standard streams on /dev/null, gets the pipe's write end in *ready_fd and -1 is returned.
int Daemonize(int* ready_fd) {
  int pipefd[2];
  if (pipe2(pipefd, O_CLOEXEC) != 0) return Fail(std::string("pipe: ") + std::strerror(errno));
  pid_t pid = fork();
  if (pid < 0) return Fail(std::string("fork: ") + std::strerror(errno));
  if (pid > 0) {
    close(pipefd[1]);
    std::string line;
    char c;
    while (read(pipefd[0], &c, 1) == 1 && c != '\n') line += c;
    if (line == "ok") return 0;
    if (line.rfind("error ", 0) == 0) return Fail(line.substr(6));
    return Fail("the daemon ended before the mount served");
  }
  close(pipefd[0]);
  setsid();
  if (chdir("/") != 0) spdlog::warn("chdir /: {}", std::strerror(errno));
  int null = open("/dev/null", O_RDWR | O_CLOEXEC);
  if (null >= 0) {
    for (int fd = 0; fd < 3; ++fd) dup2(null, fd);
    if (null > 2) close(null);
  }
  *ready_fd = pipefd[1];
  return -1;
}

// The cache memory file of the backing store (fs/cache_memory_file.h), after recovering what an
// earlier mount whose daemon died left in it; fd -1 when there is none to be had (said why). An
// error when that recovery failed: the file stays, and this mount must not go on.
Result<CacheMemoryFile> RecoverEarlierMountOf(const MountOptions& o) {
  std::string node;
  if (o.config.shared) {
    Result<std::string> resolved = NodeNameOrHostName(o.config.node);
    if (!resolved.ok()) return resolved.status();
    node = *resolved;
  }
  Result<CacheMemoryFile> file = OpenCacheMemoryFile(kCacheMemoryDir, o.config.backing_dir, node);
  if (!file.ok()) {
    spdlog::info("no cache memory file ({}): if this mount's daemon dies, the next mount cannot "
                 "recover what it had not made durable", file.status().ToString());
    return CacheMemoryFile{};
  }
  if (!file->left_by_earlier_mount) return file;
  spdlog::warn("{} holds what an earlier mount of {} had not made durable when its daemon died: "
               "recovering it", file->path, o.config.backing_dir);
  Status fallback;
  Status recovered = RecoverEarlierMount(o.config, file->fd, MakeBestEnv(o.config.queue_depth,
                                                                         &fallback));
  if (!recovered.ok()) {
    close(file->fd);
    return Status::Error(recovered.err(),
                         "cannot recover what an earlier mount left in " + file->path + ": " +
                             recovered.message() +
                             " (the file stays: mount again to retry, or remove it to drop it)");
  }
  spdlog::warn("recovered what the earlier mount left: it is durable in {}", o.config.backing_dir);
  return file;
}

// Says at mount whether the cache's shared memory gets huge pages (fs/huge_pages.h).
void LogHugePages(const HugePages& huge) {
  if (huge.given) {
    spdlog::info("the cache's memory gets huge pages: {}", huge.how);
  } else {
    spdlog::warn("the cache's memory gets small pages ({}): saves cost the daemon more CPU",
                 huge.how);
  }
}

// The shared memory of the workers' cache: `file`, or a memfd when it cannot be had; none for a
// private cache (and `file` goes), or when no shared memory can be had (said loudly: a worker's
// death then ends the mount).
void SetUpCacheMemory(const MountOptions& o, const CacheMemoryFile& file, SupervisorSetup* setup) {
  const bool shared_cache = o.cache_memory == CacheMemory::kShared;
  if (file.fd >= 0 && shared_cache) {
    Status sized = SizeCacheMemoryFile(file, o.config.cache_size);
    if (sized.ok()) {
      setup->arena_fd = file.fd;
      setup->arena_file = file;
      LogHugePages(HugePagesForFile(file.path, o.set_huge_pages));
      return;
    }
    spdlog::warn("the cache's memory is not kept in a file ({}): if this mount's daemon dies, the "
                 "next mount cannot recover what it had not made durable", sized.ToString());
  }
  if (file.fd >= 0) {
    RemoveCacheMemoryFile(file);
    close(file.fd);
  }
  if (!shared_cache) {
    spdlog::warn("the cache is in each worker's private memory (cache_memory=private): a "
                 "worker's death ends the mount, and what it had not made durable is lost");
    return;
  }
  if (Result<int> arena = MakeArenaMemory(o.config.cache_size); arena.ok()) {
    setup->arena_fd = *arena;
    LogHugePages(HugePagesForMemfd(o.set_huge_pages));
  } else {
    spdlog::error("no shared memory for the cache ({}): it is in each worker's private memory, "
                  "so a worker's death ends the mount, and what it had not made durable is lost",
                  arena.status().ToString());
  }
}

int Mount(int argc, char** argv) {
  // Replies are built in large buffers; keep them in the heap rather than mapping and unmapping
  // them per request (each unmap costs a TLB shootdown across the FUSE threads).
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  CLI::App app{"ckptfs: a FUSE filesystem that stages checkpoint writes in memory and flushes\n"
               "them to BACKING with io_uring, in close order, durably.\n"
               "Client commands: ckptfs sync MOUNTPOINT [--progress] [--remote],\n"
               "ckptfs status MOUNTPOINT, ckptfs upgrade MOUNTPOINT [--binary PATH],\n"
               "ckptfs verify PATH... [--json FILE]",
               "ckptfs"};
  MountOptions o;
  std::string backing;
  std::vector<std::string> option_lists;
  std::string worker;
  app.add_option("BACKING", backing, "Directory where checkpoints are stored")->required();
  app.add_option("MOUNTPOINT", o.mountpoint, "Where to mount")->required();
  app.add_flag("-f,--foreground", o.foreground, "Stay in the foreground");
  app.add_flag("-d,--debug", o.debug, "Trace requests and log at debug level (implies -f)");
  app.add_option("-o", option_lists, "Mount options, comma separated (below)")
      ->allow_extra_args(false);
  // Internal: how the supervisor starts a worker (fs/worker.h).
  app.add_option("--worker", worker)->group("");
  app.footer(MountOptionsHelp());
  app.set_version_flag("-V,--version", std::string("ckptfs ") + CKPTFS_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);
    return Fail(e.what());
  }
  o.config.cache_size = DefaultCacheSize();
  for (const std::string& list : option_lists) {
    Status st = ApplyMountOptions(list, &o);
    if (!st.ok()) return Fail(st.message());
  }
  if (Status together = CheckOptionsTogether(o.config); !together.ok()) {
    return Fail(together.message());
  }
  const bool worker_asked_foreground = o.foreground;
  if (o.debug) o.foreground = true;
  o.config.backing_dir = backing;

  if (!worker.empty()) {
    WorkerDescriptors fds;
    if (!ParseWorkerDescriptors(worker, &fds)) return Fail("--worker takes FUSE_FD,CONTROL_FD,READY_FD[,ARENA_FD]");
    SetUpLogging(o, /*daemon=*/!o.foreground);
    // Every open file of the flusher and every evicted file holds a descriptor.
    rlimit nofile {};
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
      nofile.rlim_cur = nofile.rlim_max;
      setrlimit(RLIMIT_NOFILE, &nofile);
    }
    return RunWorker(o, fds);
  }

  if (Status fits = CheckCacheSize(o.config.cache_size, ReadMemoryBounds()); !fits.ok()) {
    return Fail(fits.message());
  }
  if (std::string why = CheckMountpoint(o.mountpoint, backing); !why.empty()) return Fail(why);
  {
    std::unique_ptr<Env> posix = MakePosixEnv();
    Result<int> dir = OpenBackingDirectory(*posix, backing);
    if (!dir.ok()) return Fail(dir.status().ToString());
    posix->Close(*dir);
  }
  if (!o.config.remote.empty()) {
    Result<S3Settings> remote = RemoteSettingsOf(o.config, ProcessEnvironment());
    if (!remote.ok()) return Fail(remote.status().message());
    if (Status usable = CheckRemote(*remote); !usable.ok()) return Fail(usable.message());
  }
  if (o.config.replicas > 0) {
    Result<replication::GroupSecret> secret =
        replication::GroupSecret::Load(o.config.replication_secret);
    if (!secret.ok()) return Fail("replicas: " + secret.status().message());
  }
  if (access("/dev/fuse", R_OK | W_OK) != 0) {
    return Fail(std::string("cannot use /dev/fuse: ") + std::strerror(errno));
  }
  if (o.io_uring == IoUring::kOn && !KernelOffersFuseRing()) {
    return Fail("io_uring=on: the kernel does not offer FUSE over io_uring (Linux 6.14+ with "
                "/sys/module/fuse/parameters/enable_uring set to Y)");
  }
  const std::string binary = SelfBinary();
  if (binary.empty()) return Fail(std::string("cannot find this binary: ") + std::strerror(errno));
  o.config.backing_dir = RealPath(backing);
  const std::string mountpoint = RealPath(o.mountpoint);
  Result<ControlMapping> control = CreateControlBlock();
  if (!control.ok()) return Fail(control.status().ToString());
  SetField(control->block->binary, binary);
  SetUpLogging(o, false);
  Result<CacheMemoryFile> cache_file = RecoverEarlierMountOf(o);
  if (!cache_file.ok()) return Fail(cache_file.status().message());

  for (const std::string& ignored : o.ignored_options) {
    spdlog::debug("ignored the generic mount option {}", ignored);
  }
  Result<std::unique_ptr<MetricsServer>> metrics = MetricsServer::Bind(o, mountpoint);
  if (!metrics.ok()) return Fail(metrics.status().ToString());

  std::string fuse_opts = FuseMountOptions(o);
  std::vector<const char*> fargv = {argv[0], "-o", fuse_opts.c_str()};
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(fargv.size()), const_cast<char**>(fargv.data()));
  const fuse_lowlevel_ops& ops = FuseOperations();
  fuse_session* se = fuse_session_new(&args, &ops, sizeof ops, nullptr);
  fuse_opt_free_args(&args);
  if (!se) return Fail("cannot create the FUSE session (bad FUSE options?)");
  if (fuse_session_mount(se, mountpoint.c_str()) != 0) {
    fuse_session_destroy(se);
    return Fail("cannot mount on " + o.mountpoint);
  }
  RaiseReadAhead(mountpoint);
  SupervisorSetup setup{se, *control, -1, {}, {o.config.backing_dir, mountpoint}, -1, mountpoint};
  SetUpCacheMemory(o, *cache_file, &setup);
  if (worker_asked_foreground) setup.worker_args.push_back("-f");
  if (o.debug) setup.worker_args.push_back("-d");
  for (const std::string& list : option_lists) {
    setup.worker_args.push_back("-o");
    setup.worker_args.push_back(list);
  }
  if (!o.foreground) {
    spdlog::drop("ckptfs");
    if (int verdict = Daemonize(&setup.ready_fd); verdict >= 0) {
      // The launcher: the daemon holds the mount and the session; nothing here is to be undone.
      std::fflush(nullptr);
      _exit(verdict);
    }
    SetUpLogging(o, true);
  }
  spdlog::info("mounting {} on {} (cache {} MiB); workers start from {}", backing, o.mountpoint,
               o.config.cache_size >> 20, binary);
  if (*metrics) (*metrics)->Start();
  int status = RunSupervisor(setup);
  metrics->reset();
  fuse_session_destroy(se);
  return status;
}

}  // namespace
}  // namespace ckptfs

int main(int argc, char** argv) {
  if (argc >= 2 && (std::strcmp(argv[1], "sync") == 0 || std::strcmp(argv[1], "status") == 0 ||
                    std::strcmp(argv[1], "upgrade") == 0)) {
    return ckptfs::RunClient(argc, argv);
  }
  if (argc >= 2 && std::strcmp(argv[1], "verify") == 0) return ckptfs::RunVerify(argc, argv);
  return ckptfs::Mount(argc, argv);
}
