// Handoff: what a worker replaced without unmounting (an upgrade, a signalled restart) leaves the
// next worker of the same mount, which takes over the kernel's FUSE connection where it stopped.
//
// The kernel keeps node ids (with lookup counts), open file handles and directory handles across
// the replacement; the image says what each one is. The old worker makes it only once everything
// sealed is durable (Filesystem::Handoff), so a named file the kernel knows is what the backing
// store holds under that name, except for the unsealed changes of files open for writing and the
// files removed while open. Their content stays where it is when it is all in blocks of a shared
// arena (core/memory/arena.h): the image names the blocks, which the new worker adopts; otherwise
// it goes to a handoff file in the staging directory, which the new worker reads as the file's
// content.
//
// The image crosses from one binary to another (possibly another version): it is JSON, and
// decoding treats it as untrusted input (bounded, checked, never executed).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/backing/backing_store.h"
#include "core/base/status.h"
#include "core/tree/namespace.h"

namespace ckptfs {

// Largest image DecodeHandoff accepts.
inline constexpr size_t kMaxHandoffImage = 256ull << 20;

struct HandoffImage {
  // An inode the kernel knows (or an ancestor of one), listed after its parent.
  struct InodeRecord {
    uint64_t ino = 0;
    uint64_t parent = 0;  // 0 with an empty name: a file removed while open.
    std::string name{};
    uint64_t lookups = 0;
    // A regular file whose content of `size` bytes is handed over (unsealed changes, or a
    // removed file), with the attributes it had: in `blocks` (block index, arena slot) when
    // `in_memory`, else in a handoff file.
    bool has_content = false;
    bool in_memory = false;
    std::vector<std::pair<uint64_t, uint64_t>> blocks{};
    uint64_t size = 0;
    uint32_t mode = 0;  // Permission bits.
    uint32_t uid = 0;
    uint32_t gid = 0;
    int64_t mtime_ns = 0;
    int64_t ctime_ns = 0;
  };
  // An open file handle (fh) as the kernel holds it.
  struct HandleRecord {
    uint64_t fh = 0;
    uint64_t ino = 0;  // A control file's inode, or a regular file's.
    int flags = 0;
    bool direct = false;
    bool passthrough = false;
    int backing_id = -1;
    bool wrote = false;  // Its latest change is not sealed: its close seals the file.
  };
  struct DirHandleRecord {
    uint64_t fh = 0;
    std::vector<DirEntry> entries{};
  };

  std::vector<InodeRecord> inodes{};
  std::vector<HandleRecord> handles{};
  std::vector<DirHandleRecord> dir_handles{};
};

std::string EncodeHandoff(const HandoffImage& image);
// EINVAL, with what is wrong, for anything but an image EncodeHandoff could have made (parents
// listed before their children, names CheckName accepts, sizes within bounds).
Result<HandoffImage> DecodeHandoff(std::string_view text);

// The name of the handoff file holding the content of inode `ino`.
std::string HandoffFileName(uint64_t ino);
// The name the handoff file of inode `ino` takes when worker `worker` takes it over as the
// spill file of that content (IsSpillFileName holds for it).
std::string TakenOverSpillName(uint32_t worker, uint64_t ino);

}  // namespace ckptfs
