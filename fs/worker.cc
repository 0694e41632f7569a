#include "fs/worker.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/base/memory_policy.h"
#include "core/filesystem/filesystem.h"
#include "core/memory/arena.h"
#include "core/recovery/cache_memory_layout.h"
#include "core/recovery/handoff.h"
#include "fs/control_block.h"
#include "fs/fuse_adapter.h"
#include "fs/fuse_ring.h"
#include "fs/request_poller.h"
#include "fs/session_hooks.h"
#include "fs/write_landing.h"
#include "iouring/env.h"

namespace ckptfs {
namespace {

// A handoff refused for now (EAGAIN) is tried again this often, this many times.
constexpr std::chrono::milliseconds kHandoffRetryEvery{200};
constexpr int kHandoffTries = 300;
// Before an upgrade stops serving, sealed data is made durable in rounds while trainers go on,
// until at most this much is left for the handoff itself to wait for, or after this many rounds.
constexpr uint64_t kHandoffUnflushedBytes = 256ull << 20;
constexpr int kDrainRounds = 8;

// Ring entries per CPU when requests come over io_uring.
constexpr unsigned kRingDepth = 4;

ControlBlock* control_block = nullptr;  // Mapped before the session starts.
std::unique_ptr<FuseRing> fuse_ring;    // When requests may come over io_uring.
std::atomic<bool> handoff_wanted{false};
// A byte written here asks the drainer for an upgrade (UpgradeDrainer); closing it ends the
// drainer. Written from a signal handler.
int upgrade_pipe[2] = {-1, -1};

void StoreInit(const char* request, size_t length) {
  if (length > sizeof control_block->init) {
    spdlog::warn("the kernel's INIT request ({} bytes) does not fit the control block: a later "
                 "worker cannot take over", length);
    return;
  }
  std::memcpy(control_block->init, request, length);
  control_block->init_length = static_cast<uint32_t>(length);
}

// Ends the session loop so that the worker hands over (the loop's threads finish the requests
// they are serving first).
void AskHandoff() {
  handoff_wanted = true;
  kill(getpid(), SIGTERM);
}

// A worker serving FUSE over io_uring cannot hand over: the kernel keeps putting requests into
// its ring's entries until the process ends, and those are never answered.
Status HandoffAllowed() {
  if (!fuse_ring) return Status::Ok();
  return Status::Error(ENOTSUP, "a mount with io_uring=on cannot hand over to another worker "
                                "(requests in its ring would be lost): unmount and mount again");
}

void OnUpgradeSignal(int) {
  const char c = 1;
  if (write(upgrade_pipe[1], &c, 1) < 0) return;
}

// Serves upgrade requests: makes what is sealed durable while the mount still serves, then asks
// for the handoff, which then waits only for what the trainers sealed meanwhile. Returns when
// the pipe's write end is closed.
void UpgradeDrainer(Filesystem& fs) {
  char c;
  while (read(upgrade_pipe[0], &c, 1) == 1) {
    const int64_t started = MonotonicNanos();
    int rounds = 0;
    while (rounds < kDrainRounds && fs.UnflushedBytes() > kHandoffUnflushedBytes) {
      ++rounds;
      if (Status st = fs.Sync(); !st.ok()) {
        spdlog::warn("upgrade: flushing before the handoff: {}", st.ToString());
        break;
      }
    }
    spdlog::info("upgrade: {} rounds of flushing before the handoff ({:.1f} ms), {} bytes left",
                 rounds, static_cast<double>(MonotonicNanos() - started) / 1e6,
                 fs.UnflushedBytes());
    AskHandoff();
  }
}

void Tell(int ready_fd, const std::string& line) {
  if (ready_fd < 0) return;
  std::string text = line + "\n";
  if (write(ready_fd, text.data(), text.size()) < 0) {
    spdlog::warn("cannot tell the supervisor: {}", std::strerror(errno));
  }
  close(ready_fd);
}

// What `ckptfs upgrade` may be given: an executable regular file, named by an absolute path.
Status CheckBinary(const std::string& path) {
  if (path.empty() || path[0] != '/') {
    return Status::Error(EINVAL, "the new binary must be named by an absolute path: " + path);
  }
  struct stat st {};
  if (stat(path.c_str(), &st) != 0) return Status::FromErrno(path);
  if (!S_ISREG(st.st_mode)) return Status::Error(EINVAL, path + " is not a regular file");
  if (access(path.c_str(), X_OK) != 0) return Status::FromErrno(path + " is not executable");
  if (path.size() >= sizeof control_block->requested_binary) {
    return Status::Error(ENAMETOOLONG, path);
  }
  return Status::Ok();
}

}  // namespace

std::string WorkerInfo(const ControlBlock& b, int64_t started_ns) {
  nlohmann::json j;
  j["pid"] = getpid();
  j["supervisor_pid"] = getppid();
  j["number"] = b.worker;
  j["binary"] = FieldText(b.binary);
  j["version"] = CKPTFS_VERSION;
  j["handoffs"] = b.handoffs;
  j["crashes"] = b.crashes;
  j["resent_requests"] = ResentRequests();
  j["io_uring_requests"] = fuse_ring ? fuse_ring->Served() : 0;
  AddRequestPollStats(&j);
  // From when the previous worker stopped answering to the first request this one answered
  // (this one, being answered, when it is the first).
  const int64_t first_reply = FirstReplyNanos() > 0 ? FirstReplyNanos() : MonotonicNanos();
  j["takeover_ms"] = b.previous_stopped_ns > 0
                         ? static_cast<double>(first_reply - b.previous_stopped_ns) / 1e6
                         : 0.0;
  j["uptime_s"] = static_cast<double>(MonotonicNanos() - started_ns) / 1e9;
  j["upgrade_error"] = FieldText(b.upgrade_error);
  return j.dump();
}

bool ParseWorkerDescriptors(const std::string& text, WorkerDescriptors* out) {
  int fuse, control, ready, arena = -1, used = 0;
  if (std::sscanf(text.c_str(), "%d,%d,%d%n", &fuse, &control, &ready, &used) != 3) return false;
  const std::string rest = text.substr(static_cast<size_t>(used));
  if (!rest.empty()) {
    int more = 0;
    if (std::sscanf(rest.c_str(), ",%d%n", &arena, &more) != 1 ||
        static_cast<size_t>(more) != rest.size() || arena < 0) {
      return false;
    }
  }
  if (fuse < 0 || control < 0 || ready < 0) return false;
  *out = {fuse, control, ready, arena};
  return true;
}

int RunWorker(const MountOptions& o, const WorkerDescriptors& fds) {
  const int64_t started_ns = MonotonicNanos();
  Result<ControlMapping> control = MapControlBlock(fds.control);
  if (!control.ok()) {
    Tell(fds.ready, "error " + control.status().ToString());
    return 1;
  }
  control_block = control->block;
  ControlBlock& block = *control_block;
  const bool takeover = block.init_length > 0;

  Config config = o.config;
  config.worker = block.worker;
  struct stat arena_stat {};
  if (fds.arena >= 0 && fstat(fds.arena, &arena_stat) == 0 &&
      static_cast<uint64_t>(arena_stat.st_size) >= ArenaMemoryBytes(config.cache_size)) {
    config.arena_fd = fds.arena;
  } else if (fds.arena >= 0) {
    spdlog::warn("the cache's shared memory is smaller than cache_size: this worker's cache is "
                 "private, and what it holds unsealed is written out when it hands over");
  }
  Status fallback;
  std::unique_ptr<Env> env = MakeBestEnv(config.queue_depth, &fallback);
  if (!fallback.ok()) spdlog::warn("io_uring unavailable, using POSIX I/O: {}", fallback.ToString());
  Result<std::unique_ptr<Filesystem>> made = Filesystem::Make(config, std::move(env));
  if (!made.ok()) {
    Tell(fds.ready, "error " + made.status().ToString());
    return 1;
  }
  Filesystem& fs = **made;
  fs.SetUpgradeHandler([](const std::string& binary) {
    std::string path = binary.empty() ? FieldText(control_block->binary) : binary;
    if (Status bad = CheckBinary(path); !bad.ok()) return bad;
    SetField(control_block->requested_binary, path);
    SetField(control_block->upgrade_error, "");
    spdlog::info("upgrade to {} asked for: handing over", path);
    OnUpgradeSignal(SIGUSR1);
    return Status::Ok();
  });
  fs.SetWorkerInfo([started_ns] { return WorkerInfo(*control_block, started_ns); });
  fs.SetRequestStats(RequestLatencyJson);
  if (block.image_length > 0) {
    Result<HandoffImage> image = DecodeHandoff(control->image_text());
    Status restored = image.ok() ? fs.Restore(*image) : image.status();
    if (!restored.ok()) spdlog::error("taking over: {}", restored.ToString());
    block.image_length = 0;
  } else if (Status recovered = fs.RecoverCrashedWorker(); !recovered.ok()) {
    spdlog::error("recovering what the previous worker sealed: {}", recovered.ToString());
  }

  std::string fuse_opts = FuseMountOptions(o);
  ConfigureAdapter({o.max_read, o.direct_read});
  std::vector<const char*> fargv = {"ckptfs", "-o", fuse_opts.c_str()};
  if (o.debug) fargv.push_back("-d");
  fuse_args args = FUSE_ARGS_INIT(static_cast<int>(fargv.size()), const_cast<char**>(fargv.data()));
  const fuse_lowlevel_ops& ops = FuseOperations();
  fuse_session* se = fuse_session_new(&args, &ops, sizeof ops, &fs);
  fuse_opt_free_args(&args);
  const std::string device = "/dev/fd/" + std::to_string(fds.fuse);
  if (!se || fuse_set_signal_handlers(se) != 0 || fuse_session_mount(se, device.c_str()) != 0) {
    Tell(fds.ready, "error cannot set up the FUSE session");
    return 1;
  }
  // The kernel reads passthrough files itself: verify=reads could not check them.
  const bool passthrough = !VerifiesReads(o.config.verify) &&
                           (o.passthrough == Passthrough::kOn ||
                            (o.passthrough == Passthrough::kAuto && MayRegisterBackingFiles()));
  if (!InstallSessionHooks(se, passthrough) && takeover) {
    Tell(fds.ready, "error cannot hook the FUSE session to take it over");
    return 1;
  }
  if (passthrough) fs.SetPassthrough(OpenBacking, CloseBacking);
  if (o.io_uring == IoUring::kOn) {
    Result<std::unique_ptr<FuseRing>> ring =
        FuseRing::Make(se, fuse_session_fd(se), kMaxWriteBytes, kRingDepth);
    if (!ring.ok()) {
      Tell(fds.ready, "error " + ring.status().ToString());
      return 1;
    }
    fuse_ring = std::move(*ring);
    WantRing(fuse_ring->PayloadBytes(), [] { fuse_ring->Register(); });
  }
  if (takeover) {
    ReplayInit(se, block.init, block.init_length);
  } else {
    RecordInit(StoreInit);
  }
  fs.SetPageCacheInvalidator([se](uint64_t ino, uint64_t offset, uint64_t length) {
    fuse_lowlevel_notify_inval_inode(se, ino, static_cast<off_t>(offset),
                                     static_cast<off_t>(length));
  });
  // Written, never spliced: the session hooks take a spliced message for the reply to the
  // request being served (a ring request's reply goes to its ring entry).
  fs.SetPageCacheFiller([se](uint64_t ino, const char* data, size_t size) {
    fuse_bufvec bytes = FUSE_BUFVEC_INIT(size);
    bytes.buf[0].mem = const_cast<char*>(data);
    return fuse_lowlevel_notify_store(se, ino, 0, &bytes, FUSE_BUF_NO_SPLICE) == 0;
  });
  fs.Start();
  if (takeover) {
    int err = ResendUnanswered();
    if (err != 0) {
      spdlog::error("the kernel cannot send again what the previous worker left unanswered ({}): "
                    "those requests wait until the mount goes", std::strerror(err));
    }
    spdlog::info("worker {} took over {} (worker {} stopped answering {:.1f} ms ago)",
                 block.worker, o.mountpoint, block.worker - 1,
                 static_cast<double>(MonotonicNanos() - block.previous_stopped_ns) / 1e6);
  }
  if (pipe2(upgrade_pipe, O_CLOEXEC) != 0) {
    Tell(fds.ready, "error " + Status::FromErrno("pipe").ToString());
    return 1;
  }
  std::thread drainer(UpgradeDrainer, std::ref(fs));
  struct sigaction upgrade_action {};
  upgrade_action.sa_handler = OnUpgradeSignal;
  sigaction(SIGUSR1, &upgrade_action, nullptr);
  Tell(fds.ready, "ok");

  fuse_loop_config* loop = fuse_loop_cfg_create();
  fuse_loop_cfg_set_max_threads(loop, 16);
  SetRequestPollMax(o.request_poll);
  SetRequestPollPause(&fs.flushing());
  std::thread retry;
  int tries = 0;
  int status = 0;
  while (true) {
    if (policy::LandsWrites(o.config.cache_size)) StartWriteLanding(fs.cache_blocks());
    int loop_result = fuse_session_loop_mt(se, loop);
    StopWriteLanding();
    if (retry.joinable()) retry.join();
    if (!handoff_wanted && loop_result <= 0) {
      // The mount is gone (a positive result is a signal, which asks for a handoff).
      spdlog::info("unmounted {}; flushing what is left", o.mountpoint);
      Status st = fs.Shutdown();
      if (!st.ok()) {
        spdlog::error("unmount: {}", st.ToString());
        status = 1;
      } else {
        spdlog::info("all data is durable in {}", o.config.backing_dir);
      }
      break;
    }
    const int64_t stopped_ns = MonotonicNanos();
    Status allowed = HandoffAllowed();
    Result<HandoffImage> image = allowed.ok() ? fs.Handoff() : Result<HandoffImage>(allowed);
    if (image.ok()) {
      std::string text = EncodeHandoff(*image);
      if (text.size() <= kMaxHandoffImage) {
        std::memcpy(control->image(), text.data(), text.size());
        block.image_length = text.size();
        block.previous_stopped_ns = stopped_ns;
        spdlog::info("handed over {} inodes and {} open files", image->inodes.size(),
                     image->handles.size());
        status = kWorkerHandedOver;
        break;
      }
      spdlog::error("handoff: the image ({} bytes) is too large; serving on", text.size());
      SetField(control_block->requested_binary, "");
    } else if (image.status().err() == EAGAIN && ++tries < kHandoffTries) {
      retry = std::thread([] {
        std::this_thread::sleep_for(kHandoffRetryEvery);
        AskHandoff();
      });
    } else {
      spdlog::error("handoff failed, serving on: {}", image.status().ToString());
      SetField(control_block->upgrade_error, "handoff failed: " + image.status().ToString());
      SetField(control_block->requested_binary, "");
      tries = 0;
    }
    handoff_wanted = false;
    fuse_session_reset(se);
  }
  signal(SIGUSR1, SIG_IGN);
  close(upgrade_pipe[1]);
  drainer.join();  // Before the signal handlers go: it may still ask for a handoff.
  close(upgrade_pipe[0]);
  if (status == kWorkerHandedOver) {
    // The next worker waits for this process to end: the kernel takes down the cache's mappings
    // and everything else faster than destructors would.
    fs.Retire();
    kill(getppid(), kHandedOverSignal);
    spdlog::shutdown();
    _exit(status);
  }
  fuse_loop_cfg_destroy(loop);
  if (fuse_ring) {
    spdlog::info("{} requests served over io_uring", fuse_ring->Served());
    fuse_ring.reset();
  }
  fuse_remove_signal_handlers(se);
  made->reset();
  fuse_session_destroy(se);  // Closes this process' descriptor of the connection only.
  return status;
}

}  // namespace ckptfs
