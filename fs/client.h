// The client subcommands that talk to a running mount through its .ckptfs/ control directory.
#pragma once

namespace ckptfs {

// `ckptfs sync MOUNTPOINT [--progress]`,
// `ckptfs status MOUNTPOINT [--json | --watch [--interval S]]` and
// `ckptfs upgrade MOUNTPOINT [--binary PATH] [--timeout SECONDS]`.
// Returns the process exit code.
int RunClient(int argc, char** argv);

}  // namespace ckptfs
