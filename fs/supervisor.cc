#include "fs/supervisor.h"

#include <fcntl.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>

#include "core/memory/arena.h"
#include "core/recovery/cache_memory_layout.h"
#include "core/recovery/recovery_log.h"
#include "fs/worker.h"

namespace ckptfs {
namespace {

volatile sig_atomic_t stop_asked = 0;
volatile sig_atomic_t handoff_asked = 0;
volatile sig_atomic_t handed_over = 0;

void OnStop(int) { stop_asked = 1; }
void OnHandoff(int) { handoff_asked = 1; }
void OnHandedOver(int) { handed_over = 1; }

// Handlers that interrupt waitpid and read (no SA_RESTART).
void InstallHandlers() {
  struct sigaction sa {};
  sigemptyset(&sa.sa_mask);
  sa.sa_handler = OnStop;
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
  sa.sa_handler = OnHandoff;
  sigaction(SIGHUP, &sa, nullptr);
  sa.sa_handler = OnHandedOver;
  sigaction(kHandedOverSignal, &sa, nullptr);
  sa.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &sa, nullptr);
}

std::string Describe(int status) {
  if (WIFSIGNALED(status)) return std::string("killed by ") + strsignal(WTERMSIG(status));
  return "exit status " + std::to_string(WEXITSTATUS(status));
}

struct Started {
  pid_t pid = -1;
  bool serving = false;
  std::string error{};
};

class Supervisor {
 public:
  explicit Supervisor(const SupervisorSetup& setup) : s_(setup), block_(*setup.control.block) {}

  int Run() {
    InstallHandlers();
    std::string binary = FieldText(block_.binary);
    std::string fallback;  // The binary before an upgrade, until the new one serves.
    bool first = true;
    int quick_deaths = 0;
    while (true) {
      Started w = Start(binary);
      if (exiting_ > 0) {
        Reap(exiting_);
        exiting_ = -1;
      }
      if (!w.serving) {
        int status = Reap(w.pid);
        if (w.error.empty()) w.error = "the worker ended before serving (" + Describe(status) + ")";
        if (first) {
          Report("error " + w.error);
          Unmount();
          ForgetCacheMemory();
          return 1;
        }
        if (!fallback.empty()) {
          spdlog::error("upgrade to {} failed ({}); {} takes over again", binary, w.error,
                        fallback);
          SetField(block_.upgrade_error, "upgrade to " + binary + " failed: " + w.error);
          binary = fallback;
          SetField(block_.binary, binary);
          fallback.clear();
          continue;
        }
        spdlog::error("a new worker could not start: {}", w.error);
        if (++quick_deaths >= 3 || stop_asked) return GiveUp();
        sleep(1);
        continue;
      }
      if (first) {
        spdlog::info("mounted: serving {}", s_.mountpoint);
        Report("ok");
        sd_notifyf(0, "READY=1\nSTATUS=serving %s", s_.mountpoint.c_str());
      } else {
        sd_notifyf(0, "STATUS=serving %s (worker %u)", s_.mountpoint.c_str(), block_.worker);
      }
      first = false;
      fallback.clear();
      const int64_t started = MonotonicNanos();
      int status = Wait(w.pid);
      block_.worker++;
      if (WIFEXITED(status) && WEXITSTATUS(status) == kWorkerHandedOver) {
        block_.handoffs++;
        quick_deaths = 0;
        std::string requested = FieldText(block_.requested_binary);
        SetField(block_.requested_binary, "");
        if (!requested.empty() && requested != binary) {
          fallback = binary;
          binary = requested;
          SetField(block_.binary, binary);
          SetField(block_.upgrade_error, "");
        }
        spdlog::info("worker {} handed over; starting {}", w.pid, binary);
        continue;
      }
      if (WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1)) {
        // The mount went: the worker flushed what it held (1: some of it to a rescue directory).
        Unmount();
        ForgetCacheMemory();
        return WEXITSTATUS(status);
      }
      block_.crashes++;
      block_.previous_stopped_ns = MonotonicNanos();
      if (s_.arena_fd < 0) {
        // What the dead worker held is gone with its private memory: a new worker would publish
        // what is closed after it, over the hole. The mount ends instead, loudly.
        spdlog::critical("worker {} died ({}) with the cache in its private memory: what it had "
                         "not made durable is lost; the mount ends so that nothing closed after "
                         "it is published (cache_memory=shared keeps everything)",
                         w.pid, Describe(status));
        Unmount();
        return 1;
      }
      if (Status readable = RecoverableState(); !readable.ok()) {
        // As with a private cache: a new worker would find less than the dead one held and
        // publish what is closed after it, over the hole.
        spdlog::critical("worker {} died ({}) and what it held cannot be taken over ({}): what "
                         "it had not made durable is lost; the mount ends so that nothing "
                         "closed after it is published",
                         w.pid, Describe(status), readable.ToString());
        Unmount();
        return 1;
      }
      spdlog::error("worker {} died ({}); starting another: it takes over what the cache in "
                    "shared memory holds, the open files and the requests left unanswered",
                    w.pid, Describe(status));
      if (MonotonicNanos() - started < std::chrono::nanoseconds(kQuickDeath).count()) {
        if (++quick_deaths >= 3) return GiveUp();
      } else {
        quick_deaths = 1;
      }
      if (stop_asked) return GiveUp();
    }
  }

 private:
  // Starts `binary` as the next worker and waits until it serves or fails.
  Started Start(const std::string& binary) {
    handed_over = 0;
    int ready[2];
    if (pipe2(ready, O_CLOEXEC) != 0) return {-1, false, std::strerror(errno)};
    const int fuse_fd = fuse_session_fd(s_.session);
    std::vector<std::string> args = {binary};
    args.insert(args.end(), s_.worker_args.begin(), s_.worker_args.end());
    args.push_back("--worker");
    std::string fds = std::to_string(fuse_fd) + "," + std::to_string(s_.control.fd) + "," +
                      std::to_string(ready[1]);
    if (s_.arena_fd >= 0) fds += "," + std::to_string(s_.arena_fd);
    args.push_back(fds);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    const pid_t parent = getpid();
    const pid_t pid = fork();
    if (pid < 0) {
      close(ready[0]);
      close(ready[1]);
      return {-1, false, std::string("fork: ") + std::strerror(errno)};
    }
    if (pid == 0) {
      setpgid(0, 0);  // Out of the terminal's process group: its ^C is the supervisor's.
      prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(127);
      for (int fd : {fuse_fd, s_.control.fd, ready[1], s_.arena_fd}) {
        if (fd >= 0) fcntl(fd, F_SETFD, 0);
      }
      execv(argv[0], argv.data());
      dprintf(ready[1], "error cannot run %s: %s\n", argv[0], std::strerror(errno));
      _exit(127);
    }
    close(ready[1]);
    std::string line;
    char c;
    while (true) {
      ssize_t n = read(ready[0], &c, 1);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0 || c == '\n') break;
      if (line.size() < 4096) line += c;
    }
    close(ready[0]);
    if (line == "ok") return {pid, true, ""};
    return {pid, false, line.rfind("error ", 0) == 0 ? line.substr(6) : line};
  }

  // Waits for the worker to end, passing on what the supervisor is asked meanwhile.
  int Wait(pid_t pid) {
    while (true) {
      int status = 0;
      if (waitpid(pid, &status, 0) == pid) return status;
      if (errno != EINTR) return 0;
      if (handed_over) {
        handed_over = 0;
        if (block_.image_length > 0) {
          // Its image is complete: the next worker starts while this one exits.
          exiting_ = pid;
          return W_EXITCODE(kWorkerHandedOver, 0);
        }
      }
      if (stop_asked && !unmounted_) {
        spdlog::info("unmounting (signal)");
        sd_notify(0, "STOPPING=1\nSTATUS=unmounted; making what the mount holds durable");
        Unmount();
      }
      if (handoff_asked) {
        handoff_asked = 0;
        spdlog::info("restart asked (SIGHUP): worker {} hands over", pid);
        kill(pid, SIGUSR1);
      }
    }
  }

  // Ok when the next worker can take over what a dead one held in the cache's shared memory:
  // its recovery log reads (core/recovery/recovery_log.h).
  Status RecoverableState() const {
    struct stat st {};
    if (fstat(s_.arena_fd, &st) != 0) return Status::FromErrno("the cache's shared memory");
    Result<uint64_t> capacity = ArenaCapacityOf(static_cast<uint64_t>(st.st_size));
    if (!capacity.ok()) return capacity.status();
    return RecoveryLog::MappedReadable(s_.arena_fd, ArenaLogOffset(*capacity), kArenaLogBytes);
  }

  int Reap(pid_t pid) {
    int status = 0;
    if (pid > 0) {
      while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    return status;
  }

  void Report(const std::string& line) {
    if (s_.ready_fd < 0) {
      if (line != "ok") std::fprintf(stderr, "ckptfs: %s\n", line.substr(6).c_str());
      return;
    }
    std::string text = line + "\n";
    if (write(s_.ready_fd, text.data(), text.size()) < 0) return;
    close(s_.ready_fd);
  }

  void Unmount() {
    if (unmounted_) return;
    unmounted_ = true;
    fuse_session_unmount(s_.session);
  }

  // Once nothing is left in the cache's memory that the next mount would have to recover.
  void ForgetCacheMemory() {
    if (s_.arena_file.fd >= 0) RemoveCacheMemoryFile(s_.arena_file);
  }

  // The cache's memory file stays: the next mount of the backing store recovers what it holds.
  int GiveUp() {
    spdlog::critical("workers keep dying: unmounting");
    Unmount();
    return 1;
  }

  const SupervisorSetup& s_;
  ControlBlock& block_;
  pid_t exiting_ = -1;  // A worker that handed over and is still exiting, reaped later.
  bool unmounted_ = false;
};

}  // namespace

int RunSupervisor(const SupervisorSetup& setup) { return Supervisor(setup).Run(); }

}  // namespace ckptfs
