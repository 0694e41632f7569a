// The worker: the process that serves a mount its supervisor holds (fs/supervisor.h), started as
// `ckptfs BACKING MOUNTPOINT -o ... --worker FUSE_FD,CONTROL_FD,READY_FD,ARENA_FD`.
//
// It serves the FUSE connection it inherits (FUSE_FD); the first worker answers the kernel's INIT
// and records it in the control block (CONTROL_FD, fs/control_block.h); a later one takes over: it
// restores the handoff image its predecessor left (core/recovery/handoff.h), replays the INIT, and
// asks the kernel to send again the requests its predecessor read and never answered. It writes
// "ok" (or "error MESSAGE") and a newline to READY_FD once it serves, or fails to.
//
// Its loop ends when the mount goes (it flushes everything, as an unmount did before workers,
// and exits 0, or 1 when data had to be rescued), or to be replaced: asked for an upgrade (SIGUSR1,
// which the supervisor sends on SIGHUP, or the control file `upgrade`), it first makes what is
// sealed durable while it still serves, then hands over (Filesystem::Handoff) and exits with
// kWorkerHandedOver; on SIGTERM, SIGINT or SIGHUP it hands over at once. A handoff that cannot be
// made now (a zarr view open) is tried again; one that fails leaves the worker serving.
#pragma once

#include <csignal>

#include "fs/control_block.h"
#include "fs/options.h"

namespace ckptfs {

// The exit status of a worker that handed over.
inline constexpr int kWorkerHandedOver = 75;
// What a worker sends its supervisor once its handoff image is complete, before it exits: the
// next worker may start.
inline constexpr int kHandedOverSignal = SIGUSR2;

struct WorkerDescriptors {
  int fuse = -1;
  int control = -1;
  int ready = -1;
  int arena = -1;  // The cache's shared memory (MakeArenaMemory), or -1: private memory.
};

// Parses "FUSE_FD,CONTROL_FD,READY_FD[,ARENA_FD]"; false when malformed.
bool ParseWorkerDescriptors(const std::string& text, WorkerDescriptors* out);

// The stats' "worker" object (JSON) of the calling process, a worker started at `started_ns`
// (MonotonicNanos) under the supervisor whose control block is `block`.
std::string WorkerInfo(const ControlBlock& block, int64_t started_ns);

// Runs the worker (logging set up); returns its exit status.
int RunWorker(const MountOptions& o, const WorkerDescriptors& fds);

}  // namespace ckptfs
