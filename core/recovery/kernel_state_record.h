// KernelStateRecord: what the kernel holds of a worker, kept where the next worker of the mount
// finds it after a crash (shared memory beside the cache's blocks and the recovery log, in the
// arena's memory file, core/memory/arena.h). With it the next worker answers the node ids and file
// handles the crashed one gave, so that trainers' open files, working directories and pending
// requests go on as if nothing happened.
//
// - Nodes: every directory the kernel has a node id of, and every file open through the mount,
//   each by its parent's node id and its name (kept current across renames), so that a path of
//   any length, deeper than PATH_MAX too, is found again from the root. A node's parent is
//   recorded as well (the kernel holds every ancestor of a node it holds).
// - Handles: every open file handle (its number, node and open flags).
// - Content: for files open for writing, their size and, per arena slot, which file's block it
//   holds at which index, stamped. A file's content is its blocks stamped since its content was
//   last recorded whole (BeginContent), the newest stamp of each index, over the first bytes of
//   its spill file when it has one (a file larger than the cache, spilled while it was
//   written); a file whose content reads from another file (the backing file it was opened on)
//   is not recoverable.
//
// Entries are written so that a worker killed at any instruction leaves each one either as it
// was or complete: the field that makes an entry valid is stored last, and a name being
// rewritten is marked until it is whole. Thread-safety: AddNode, RemoveNode, AddHandle,
// RemoveHandle and Clear take a leaf lock of their own; the other writers change one node's
// entry, or one slot's tag, which the caller owns (the file's lock). The memory is untrusted
// input to a recovering worker: Read checks and bounds everything.
//
// Capacity: an operation takes entries only while HasRoom (half of each table), so that the
// worker that takes over can record everything anew beside the entries it found.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "iouring/shared_mapping.h"

namespace ckptfs {

class KernelStateRecord {
 public:
  static constexpr size_t kNodes = 65536;
  static constexpr size_t kHandles = 65536;
  static constexpr size_t kMaxName = 255;  // NAME_MAX.

  // Bytes of shared memory for an arena of `capacity_blocks`.
  static uint64_t Bytes(uint64_t capacity_blocks);

  // Over Bytes(capacity_blocks) bytes at `memory` (not owned), which a previous worker may have
  // written; zeros for a new mount.
  KernelStateRecord(char* memory, uint64_t capacity_blocks);
  // The record at `offset` of the shared memory file `fd`, mapped (and unmapped with it).
  static Result<std::unique_ptr<KernelStateRecord>> Map(int fd, uint64_t offset,
                                                        uint64_t capacity_blocks);
  KernelStateRecord(const KernelStateRecord&) = delete;
  KernelStateRecord& operator=(const KernelStateRecord&) = delete;

  // True when `nodes` node entries and `handles` handle entries more keep each table they take
  // from at most half full.
  bool HasRoom(size_t nodes, size_t handles) const EXCLUDES(mu_);
  // A new node entry: node id `ino`, named `name` in the directory of node id `parent`
  // (kRootIno: the root), or no name (parent 0, name empty: removed while open). -1 when the
  // table is full or the name is not one (CheckName).
  int AddNode(uint64_t ino, bool directory, uint64_t parent, const std::string& name)
      EXCLUDES(mu_);
  // The node's place now (renamed, or removed: parent 0 and no name, it is then not found again).
  void SetName(int node, uint64_t parent, const std::string& name);
  void RemoveNode(int node) EXCLUDES(mu_);

  // What a recorded file's content reads from besides its blocks.
  struct Base {
    bool other_file = false;  // A file that is not a spill file: not recoverable.
    std::string spill;        // A spill file's name (core/backing/backing_store.h), or empty.
    uint64_t length = 0;      // Bytes of the spill file that are the content's.
  };
  // File `node`'s content is recorded from now on: `size` bytes, the blocks tagged with the stamp
  // returned or later (the caller tags every block it holds now), over `base`. Mode and owner
  // make the file again if it has no name on the backing store.
  uint64_t BeginContent(int node, uint64_t size, const Base& base, uint32_t mode, uint32_t uid,
                        uint32_t gid);
  void SetSize(int node, uint64_t size);
  // File `node`'s content is not recorded any more (closed): it stays a plain node.
  void EndContent(int node);
  // A stamp newer than every earlier one.
  uint64_t NextStamp();
  // The block at arena `slot` is index `index` of file `ino`'s content, as of `stamp`.
  void Tag(uint64_t slot, uint64_t ino, uint64_t index, uint64_t stamp);

  // A new handle entry; -1 when the table is full.
  // `request`: the kernel's id of the open or create that made it (Caller::request).
  int AddHandle(uint64_t fh, uint64_t ino, int flags, uint64_t request = 0) EXCLUDES(mu_);
  void RemoveHandle(int handle) EXCLUDES(mu_);

  // Frees every node and handle entry (a worker that took over records its own).
  void Clear() EXCLUDES(mu_);
  // The entries in use, to be removed once all they hold is recorded again: a worker that dies
  // in between leaves both, and Read takes the newer record of each file.
  struct Entries {
    std::vector<int> nodes, handles;
  };
  Entries InUse() const;
  void Remove(const Entries& entries) EXCLUDES(mu_);

  struct Node {
    uint64_t ino = 0;
    bool directory = false;
    uint64_t parent = 0;  // The node id of its directory; 0 with no name.
    std::string name;
    bool content = false;  // Content recorded (a file open for writing).
    Base base;
    uint64_t size = 0;
    uint32_t mode = 0, uid = 0, gid = 0;
    std::vector<std::pair<uint64_t, uint64_t>> blocks;  // (index, slot), by index.
  };
  struct Handle {
    uint64_t fh = 0;
    uint64_t ino = 0;
    int flags = 0;
    uint64_t request = 0;
  };
  struct State {
    std::vector<Node> nodes;
    std::vector<Handle> handles;
    size_t refused = 0;  // Entries that were malformed or torn.
    // `n`'s path from the root through the recorded directories, for messages and rescue; empty
    // when it has no name or a directory on the way was not recorded. Not to be called once
    // `nodes` changed after an earlier call.
    std::string PathOf(const Node& n) const;

   private:
    mutable std::unordered_map<uint64_t, size_t> directories_{};  // Node id -> index in nodes.
  };
  // What the record holds (after a crash: what the crashed worker had). Of two records of a
  // file's content (the same node id, or the same parent and name), the one begun later holds
  // it; the other stays a plain node. Of two records of a handle, the first.
  State Read() const;

 private:
  struct Header;
  struct NodeEntry;
  struct HandleEntry;
  struct SlotTag;

  // Entries of each table ever used since the last Clear (as far as the table goes).
  size_t NodesUsed() const;
  size_t HandlesUsed() const;
  // A free entry of a table of `capacity` of which `used` were ever used, or -1 (mu_ held).
  static int TakeEntry(std::vector<int>& free, std::atomic<uint32_t>& used, size_t capacity);

  SharedMapping mapping_;  // When made by Map.
  Header* header_;
  NodeEntry* nodes_;
  HandleEntry* handles_;
  SlotTag* tags_;
  const uint64_t capacity_blocks_;
  mutable Mutex mu_;  // A leaf lock.
  std::vector<int> free_nodes_ GUARDED_BY(mu_);
  std::vector<int> free_handles_ GUARDED_BY(mu_);
};

}  // namespace ckptfs
