// `ckptfs verify PATH... [--json FILE]`: re-reads files and compares them with the checksum
// records the flusher kept with them (core/integrity/verifier.h), on a backing directory or
// through a mount.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

#include "fs/mount_info.h"

namespace ckptfs {

// The backing directory of a ckptfs mount, from its fsname "ckptfs:BACKING"; none for another
// filesystem or a mount given another fsname.
std::optional<std::string> BackingDirOf(const MountEntry& mount);

// How many files ended each way.
struct VerifyCounts {
  size_t ok = 0;
  size_t mismatch = 0;
  size_t error = 0;
  size_t no_checksum = 0;  // The not durable ones among them too.
  size_t not_durable = 0;
};

// 1 when a file mismatches or could not be read, else 2 when one has no (usable) record, else 0.
int VerifyExitStatus(const VerifyCounts& counts);

// "16-24": the MiB a byte range [begin, end) touches.
std::string MiBRange(uint64_t begin, uint64_t end);

// Returns the process exit code: VerifyExitStatus, or 1 when the report cannot be written.
int RunVerify(int argc, char** argv);

}  // namespace ckptfs
