// The supervisor: what `ckptfs BACKING MOUNTPOINT` leaves running. It holds the mount's FUSE
// connection (its /dev/fuse descriptor), the control block (fs/control_block.h) and the shared
// memory the workers keep their cache in, and touches no data:
// it starts a worker (fs/worker.h) to serve the mount, and when that worker ends while the mount
// is still there, starts the next one on the same connection. The kernel keeps the connection as
// long as the supervisor holds it: trainers' requests wait in its queue meanwhile, never failing.
//
// - A worker that handed over (an upgrade, SIGHUP to the supervisor, SIGTERM to the worker) is
//   followed by the binary it asked for, or the same one, started as soon as the old worker says
//   its image is complete (it then exits meanwhile); when a new binary does not start, the
//   old one takes over instead and the failure is shown in the stats (upgrade_error).
// - A worker that died is followed by the same binary, which takes over what the cache in
//   shared memory and its records hold (sealed versions, the files open and what they held, the
//   kernel's nodes and handles); the requests left unanswered are sent to it again. Three
//   workers that die within kQuickDeath of beginning to serve, in a row, end the mount (a crash
//   loop: a worker that served longer than that is replaced however often it dies). With a
//   private cache (no arena_fd) a worker's death ends the mount: what it held unflushed is lost,
//   and nothing closed after it may be published.
// - SIGTERM or SIGINT unmount: the worker flushes everything and exits, and so does the
//   supervisor, with the worker's status.
//
// Every worker dies with the supervisor (PR_SET_PDEATHSIG): the mount then goes as a daemon's did
// before workers. A shared cache's memory file stays (fs/cache_memory_file.h), also after a crash
// loop: the next mount of the backing store recovers what it held
// (core/filesystem/earlier_mount.h).
#pragma once

#include <fuse_lowlevel.h>

#include <chrono>
#include <string>
#include <vector>

#include "fs/cache_memory_file.h"
#include "fs/control_block.h"

namespace ckptfs {

inline constexpr std::chrono::seconds kQuickDeath{1};

struct SupervisorSetup {
  fuse_session* session = nullptr;  // Mounted; unmounted when the supervisor ends.
  ControlMapping control{};         // Its binary field names the first worker's binary.
  int arena_fd = -1;                // The cache's shared memory (MakeArenaMemory), or -1.
  // The file of that memory (fs/cache_memory_file.h), removed when the mount ends with all its
  // data flushed or saved; empty for a memfd.
  CacheMemoryFile arena_file{};
  // The worker's arguments after the binary; "--worker FDS" is added.
  std::vector<std::string> worker_args{};
  // Told "ok" once the first worker serves, or "error MESSAGE" when it cannot; -1: the error
  // goes to stderr.
  int ready_fd = -1;
  // The mount point, as systemd is told (sd_notify: READY=1 once the first worker serves,
  // STOPPING=1 when asked to unmount, STATUS= as workers are replaced; nothing outside systemd).
  std::string mountpoint{};
};

// Runs until the mount is gone; returns the exit status of the daemon.
int RunSupervisor(const SupervisorSetup& setup);

}  // namespace ckptfs
