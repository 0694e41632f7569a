// The libfuse low-level adapter: each handler decodes its request, makes one call into the
// Filesystem given as session userdata, and sends exactly one reply. No policy, no locks; an
// exception never crosses into libfuse (it is logged and answered with EIO).
#pragma once

#include <fuse_lowlevel.h>

namespace ckptfs {

const fuse_lowlevel_ops& FuseOperations();

}  // namespace ckptfs
