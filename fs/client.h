// The client subcommands that talk to a running mount through its .ckptfs/ control directory.
#pragma once

#include <string>

namespace ckptfs {

// Reads a whole control file of a mount (`MOUNTPOINT/.ckptfs/stats`, ...) into *out; false with
// errno set when it cannot be read.
bool ReadControlFile(const std::string& path, std::string* out);

// `ckptfs sync MOUNTPOINT [--progress]`,
// `ckptfs status MOUNTPOINT [--json | --watch [--interval S]]` and
// `ckptfs upgrade MOUNTPOINT [--binary PATH] [--timeout SECONDS]`.
// Returns the process exit code.
int RunClient(int argc, char** argv);

}  // namespace ckptfs
