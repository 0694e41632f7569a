// The mounts of this process's namespace, as /proc/self/mountinfo lists them.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ckptfs {

struct MountEntry {
  std::string device;         // "major:minor"
  std::string mount_point;    // Unescaped.
  std::string fs_type;        // "tmpfs", "fuse.ckptfs", ...
  std::string source;         // Unescaped: "/dev/vda", "ckptfs:BACKING" (a ckptfs mount's fsname).
  std::string super_options;  // The filesystem's own: "rw,size=1048576k,huge=advise".
};

// The entries of a mountinfo text, in its order (a later entry over the same point wins, as in
// the kernel); malformed lines are left out.
std::vector<MountEntry> ParseMountInfo(std::string_view text);

// This process's mounts; empty when /proc/self/mountinfo cannot be read.
std::vector<MountEntry> ReadMountInfo();

// The value of option `name` in a comma-separated option list ("huge" in "rw,huge=advise"
// gives "advise"), or "" when it is absent or has no value.
std::string OptionValue(std::string_view options, std::string_view name);

}  // namespace ckptfs
