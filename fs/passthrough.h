// FUSE passthrough (kernel 6.9+) on libfuse 3.14, which predates it.
//
// With passthrough, the kernel serves reads of a file straight from a backing file the daemon
// registered, at the backing filesystem's speed. libfuse 3.14 can neither ask for it in INIT nor
// mark an open reply with it, so this installs libfuse's custom I/O hooks on the session: they
// see each request the kernel sends and each reply, add FUSE_PASSTHROUGH to the INIT reply when
// the kernel offers it, and mark the open replies of files registered with RegisterOpen.
#pragma once

#include <fuse_lowlevel.h>

#include <cstdint>

namespace ckptfs {

// Installs the hooks on a mounted session (before its loop runs). With `wanted` false, or when
// the hooks cannot be installed, passthrough stays off and nothing changes.
void InstallPassthrough(fuse_session* se, bool wanted);

// Whether the kernel agreed to passthrough (known once INIT has been answered).
bool PassthroughActive();

// Registers `fd` (a backing file open for reading) with the kernel; returns its backing id, or
// -1 (passthrough off, or the kernel refused: it needs CAP_SYS_ADMIN).
int OpenBacking(int fd);
void CloseBacking(int backing_id);

// The open reply carrying file handle `fh` is marked to read through `backing_id`.
void RegisterOpen(uint64_t fh, int backing_id);

}  // namespace ckptfs
