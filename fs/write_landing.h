// Write landing: requests are read from /dev/fuse so that a WRITE's payload lands straight in
// cache blocks, which its file then takes wherever the write covers a block whole
// (FileContent::Land): the daemon copies none of those bytes, and the kernel's copy into them is
// the only one a direct write makes.
//
// Each request is read with readv: its first bytes (a WRITE's fuse_in_header and fuse_write_in)
// into libfuse's buffer, the rest into blocks the serving thread holds ahead (one request's
// worth); another request's bytes are copied back behind its header, as one read would have put
// them. The blocks are placed for the offset at which the last landed write ended (a sequential
// writer's next one); a write elsewhere is copied from them as it would have been from libfuse's
// buffer. Where the arena cannot spare the blocks now, a request is read as before.
#pragma once

#include <sys/types.h>

#include <cstddef>

#include "core/memory/arena.h"
#include "core/memory/file_content.h"

namespace ckptfs {

// Lands writes in `arena`'s blocks from now on; call before the session's loop runs.
void StartWriteLanding(Arena& arena);
// Gives back the blocks every thread holds and lands no more; call once the serving threads
// have stopped, before the arena goes.
void StopWriteLanding();

// Reads one request from `fd` into `buf` (`len` bytes: libfuse's buffer) as read(2) would,
// landing a WRITE's payload.
ssize_t ReadLandingWrites(int fd, void* buf, size_t len);

// The payload of the WRITE the calling thread read last, when it landed and libfuse hands it to
// the write handler at `payload`; null otherwise. Once: a second call gives null. The caller may
// take its blocks (FileContent::Land); the others go back to the thread at its next read.
LandedBytes* LandedPayload(const char* payload);

}  // namespace ckptfs
