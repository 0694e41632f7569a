// FileContent: the bytes of one regular file, as an overlay of in-memory blocks over an optional
// base file on the backing store. Copying a FileContent is cheap (blocks are shared and copied
// on write), which is how a sealed version is snapshotted while the file keeps changing.
//
// Invariants: bytes of a block beyond size() are zero; base bytes at or beyond base_len() are
// never visible (they read as zeros).
//
// Not thread-safe: the owner (an Inode) guards it with its mutex. A copy may be read from another
// thread without that lock.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "core/status.h"

namespace ckptfs {

// An open read-only descriptor of a file on the backing store; closed with the last reference.
class BackingFile {
 public:
  explicit BackingFile(int fd) : fd_(fd) {}
  ~BackingFile() { ::close(fd_); }
  BackingFile(const BackingFile&) = delete;
  BackingFile& operator=(const BackingFile&) = delete;
  int fd() const { return fd_; }

 private:
  const int fd_;
};

// One piece of a read: memory (keeps its block alive), a backing file range, or zeros.
struct ReadSegment {
  enum class Kind { kMemory, kBacking, kZeros };
  Kind kind = Kind::kZeros;
  size_t length = 0;
  BlockRef block;  // kMemory
  const char* data = nullptr;  // kMemory: points into block
  std::shared_ptr<BackingFile> file;  // kBacking
  uint64_t file_offset = 0;           // kBacking
};

class FileContent {
 public:
  FileContent() = default;
  // Content that is entirely `base` (a file on the backing store of `size` bytes).
  FileContent(std::shared_ptr<BackingFile> base, uint64_t size)
      : size_(size), base_(std::move(base)), base_len_(size) {}

  uint64_t size() const { return size_; }
  const std::map<uint64_t, BlockRef>& blocks() const { return blocks_; }
  const std::shared_ptr<BackingFile>& base() const { return base_; }
  uint64_t base_len() const { return base_len_; }

  // Number of new blocks a write of [offset, offset+length) needs (missing or shared blocks).
  size_t BlocksNeededForWrite(uint64_t offset, size_t length) const;

  // Writes `length` bytes. Takes new blocks from `reservation`, which must hold at least
  // BlocksNeededForWrite(offset, length). Fails only when the base file cannot be read.
  Status Write(uint64_t offset, const char* data, size_t length, Reservation& reservation);

  // Describes the bytes of [offset, offset+length) clipped to size(). Never fails.
  std::vector<ReadSegment> Read(uint64_t offset, size_t length) const;

  // Copies [offset, offset+length) clipped to size() into `out`; returns bytes copied.
  Result<size_t> ReadInto(uint64_t offset, size_t length, char* out) const;

  // Changes the size. Shrinking drops blocks and zeroes a partial tail, which may need one
  // block from `reservation` (when the tail block is shared); growing exposes zeros.
  void Truncate(uint64_t new_size, Reservation& reservation);
  // Blocks Truncate(new_size) may take.
  size_t BlocksNeededForTruncate(uint64_t new_size) const;

  // Drops every block, keeping the bytes readable from `base` (which holds all size() bytes).
  void ReplaceWithBase(std::shared_ptr<BackingFile> base);

  size_t memory_blocks() const { return blocks_.size(); }

 private:
  // Fills `dst` (one block at `index`) with base bytes or zeros for the parts of the block
  // that [skip_from, skip_to) will not overwrite.
  Status FillBlock(uint64_t index, char* dst, size_t skip_from, size_t skip_to) const;

  uint64_t size_ = 0;
  std::map<uint64_t, BlockRef> blocks_;  // Block index -> block.
  std::shared_ptr<BackingFile> base_;
  uint64_t base_len_ = 0;
};

}  // namespace ckptfs
