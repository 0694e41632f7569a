// ckptfs: mount a checkpoint filesystem over a backing directory, or talk to a running mount.
#include <fcntl.h>
#include <malloc.h>
#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/sinks/syslog_sink.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/filesystem.h"
#include "fs/client.h"
#include "fs/fuse_adapter.h"
#include "fs/options.h"
#include "fs/session_hooks.h"
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
// symlinks), from /proc/self/mountinfo; the last entry wins, as in the kernel. Empty if none.
std::string MountDevice(const std::string& mountpoint) {
  std::FILE* f = std::fopen("/proc/self/mountinfo", "re");
  if (!f) return "";
  std::string device;
  char* line = nullptr;
  size_t cap = 0;
  while (getline(&line, &cap, f) > 0) {
    char dev[64], point[PATH_MAX];
    if (std::sscanf(line, "%*d %*d %63s %*s %4095s", dev, point) != 2) continue;
    std::string unescaped;
    for (const char* p = point; *p; ++p) {
      if (p[0] == '\\' && p[1] >= '0' && p[1] <= '7' && p[2] && p[3]) {
        unescaped += static_cast<char>(std::strtol(std::string(p + 1, 3).c_str(), nullptr, 8));
        p += 3;
      } else {
        unescaped += *p;
      }
    }
    if (unescaped == mountpoint) device = dev;
  }
  std::free(line);
  std::fclose(f);
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

int Mount(int argc, char** argv) {
  // Replies are built in large buffers; keep them in the heap rather than mapping and unmapping
  // them per request (each unmap costs a TLB shootdown across the FUSE threads).
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  CLI::App app{"ckptfs: a FUSE filesystem that stages checkpoint writes in memory and flushes\n"
               "them to BACKING with io_uring, in close order, durably.\n"
               "Client commands: ckptfs sync MOUNTPOINT [--progress], ckptfs status MOUNTPOINT",
               "ckptfs"};
  MountOptions o;
  std::string backing;
  std::vector<std::string> option_lists;
  app.add_option("BACKING", backing, "Directory where checkpoints are stored")->required();
  app.add_option("MOUNTPOINT", o.mountpoint, "Where to mount")->required();
  app.add_flag("-f,--foreground", o.foreground, "Stay in the foreground");
  app.add_flag("-d,--debug", o.debug, "Trace requests and log at debug level (implies -f)");
  app.add_option("-o", option_lists, "Mount options, comma separated (below)")
      ->allow_extra_args(false);
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
  if (o.debug) o.foreground = true;
  o.config.backing_dir = backing;
  if (std::string why = CheckMountpoint(o.mountpoint, backing); !why.empty()) return Fail(why);
  if (access("/dev/fuse", R_OK | W_OK) != 0) {
    return Fail(std::string("cannot use /dev/fuse: ") + std::strerror(errno));
  }
  SetUpLogging(o, false);

  // Every open file of the flusher and every evicted file holds a descriptor.
  rlimit nofile {};
  if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = nofile.rlim_max;
    setrlimit(RLIMIT_NOFILE, &nofile);
  }

  Status fallback;
  std::unique_ptr<Env> env = MakeBestEnv(o.config.queue_depth, &fallback);
  if (!fallback.ok()) spdlog::warn("io_uring unavailable, using POSIX I/O: {}", fallback.ToString());
  Result<std::unique_ptr<Filesystem>> fs = Filesystem::Make(o.config, std::move(env));
  if (!fs.ok()) return Fail(fs.status().ToString());

  std::string fuse_opts = "default_permissions,fsname=ckptfs:" + RealPath(backing) + ",subtype=ckptfs";
  fuse_opts += ",max_read=" + std::to_string(o.max_read);
  for (const std::string& opt : o.fuse_options) fuse_opts += "," + opt;
  ConfigureAdapter({o.max_read, o.direct_read});
  std::vector<const char*> fargv = {argv[0], "-o", fuse_opts.c_str()};
  if (o.debug) fargv.push_back("-d");
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(fargv.size()), const_cast<char**>(fargv.data()));
  const fuse_lowlevel_ops& ops = FuseOperations();
  fuse_session* se = fuse_session_new(&args, &ops, sizeof ops, fs->get());
  fuse_opt_free_args(&args);
  if (!se) return Fail("cannot create the FUSE session (bad FUSE options?)");
  if (fuse_set_signal_handlers(se) != 0) {
    fuse_session_destroy(se);
    return Fail("cannot install signal handlers");
  }
  if (fuse_session_mount(se, o.mountpoint.c_str()) != 0) {
    fuse_remove_signal_handlers(se);
    fuse_session_destroy(se);
    return Fail("cannot mount on " + o.mountpoint);
  }
  RaiseReadAhead(o.mountpoint);
  const bool passthrough = o.passthrough == Passthrough::kOn ||
                           (o.passthrough == Passthrough::kAuto && MayRegisterBackingFiles());
  InstallSessionHooks(se, passthrough);
  if (passthrough) (*fs)->SetPassthrough(OpenBacking, CloseBacking);
  spdlog::info("mounted {} on {} (cache {} MiB, {} backend)", backing, o.mountpoint,
               o.config.cache_size >> 20, (*fs)->backend_name());
  if (!o.foreground) {
    spdlog::drop("ckptfs");
    if (fuse_daemonize(0) != 0) return Fail("cannot daemonize");
    SetUpLogging(o, true);
  }
  (*fs)->SetPageCacheInvalidator([se](uint64_t ino, uint64_t offset, uint64_t length) {
    fuse_lowlevel_notify_inval_inode(se, ino, static_cast<off_t>(offset),
                                     static_cast<off_t>(length));
  });
  (*fs)->Start();

  fuse_loop_config* loop = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(loop, 16);
  int loop_result = fuse_session_loop_mt(se, loop);
  fuse_loop_cfg_destroy(loop);
  fuse_session_unmount(se);
  fuse_remove_signal_handlers(se);
  spdlog::info("unmounted {}; flushing what is left", o.mountpoint);
  Status st = (*fs)->Shutdown();
  fuse_session_destroy(se);
  fs->reset();
  if (!st.ok()) {
    spdlog::error("unmount: {}", st.ToString());
    return 1;
  }
  spdlog::info("all data is durable in {}", backing);
  return loop_result < 0 ? 1 : 0;  // A positive result is the signal that ended the loop.
}

}  // namespace
}  // namespace ckptfs

int main(int argc, char** argv) {
  if (argc >= 2 && (std::strcmp(argv[1], "sync") == 0 || std::strcmp(argv[1], "status") == 0)) {
    return ckptfs::RunClient(argc, argv);
  }
  return ckptfs::Mount(argc, argv);
}
