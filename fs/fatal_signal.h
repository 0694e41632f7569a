// Whether the process behind a FUSE request is being killed: the kernel then waits, unkillable,
// for the request's answer, so a request that waits (for cache memory) must end instead.
#pragma once

#include <sys/types.h>

#include <string_view>

namespace ckptfs {

// Whether the text of /proc/TID/status shows SIGKILL pending for that thread: the kernel adds it
// to every thread of a process given a fatal signal (SIGKILL, or one whose default action ends
// the process and that it does not catch).
bool SigkillPendingIn(std::string_view proc_status);

// The same for thread `tid` of this machine (false when it cannot be read: gone, or 0).
bool BeingKilled(pid_t tid);

}  // namespace ckptfs
