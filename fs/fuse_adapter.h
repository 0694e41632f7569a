// The libfuse low-level adapter: each handler decodes its request, makes one call into the
// Filesystem given as session userdata, and sends exactly one reply. No policy, no locks; an
// exception never crosses into libfuse (it is logged and answered with EIO).
#pragma once

#include <fuse_lowlevel.h>

namespace ckptfs {

const fuse_lowlevel_ops& FuseOperations();

// The kernel's readahead for a FUSE mount is 128 KiB, and INIT can only lower it: a cold
// sequential read would wait on one small request at a time. The mount raises it to this
// (through sysfs, as root), which keeps several read requests in flight.
inline constexpr unsigned kReadAheadBytes = 4u << 20;

// The largest write request the kernel sends (INIT's max_write).
inline constexpr unsigned kMaxWriteBytes = 1u << 20;

struct AdapterOptions {
  unsigned max_read = 0;     // The session's max_read mount option; INIT must state the same.
  bool direct_reads = true;  // Filesystem::EnableDirectReads where the kernel allows it.
};
// Call before mounting.
void ConfigureAdapter(const AdapterOptions& options);

}  // namespace ckptfs
