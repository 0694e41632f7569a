// Kernel features newer than libfuse 3.14, through its custom I/O hooks on the session: they
// see each request the kernel sends and each reply.
//
// - FUSE_DIRECT_IO_ALLOW_MMAP (kernel 6.6+): files opened with direct_io may still be mapped
//   shared. Added to the INIT reply whenever the kernel offers it.
// - FUSE passthrough (kernel 6.9+): the kernel serves reads of a file straight from a backing
//   file the daemon registered, at the backing filesystem's speed. Added to the INIT reply when
//   wanted and offered; the open replies of files registered with RegisterOpen are marked.
#pragma once

#include <fuse_lowlevel.h>

#include <cstdint>

namespace ckptfs {

// Installs the hooks on a mounted session (before its loop runs). When they cannot be
// installed, neither feature is used.
void InstallSessionHooks(fuse_session* se, bool passthrough_wanted);

// Whether the INIT reply allows shared mmap of direct_io files (known once the INIT request has
// been read, i.e. from the init callback on).
bool DirectIoMmapAllowed();

// Whether the kernel agreed to passthrough (known once INIT has been answered).
bool PassthroughActive();

// Whether this process may register backing files with the kernel (it needs CAP_SYS_ADMIN).
bool MayRegisterBackingFiles();

// Registers `fd` (a backing file open for reading) with the kernel; returns its backing id, or
// -1 (passthrough off, or the kernel refused: it needs CAP_SYS_ADMIN).
int OpenBacking(int fd);
void CloseBacking(int backing_id);

// The open reply carrying file handle `fh` is marked to read through `backing_id`.
void RegisterOpen(uint64_t fh, int backing_id);

}  // namespace ckptfs
