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

#include <fcntl.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/memory/arena.h"
#include "core/memory/block_map.h"
#include "core/memory/written_sums.h"
#include "iouring/env.h"

namespace ckptfs {

// An open descriptor of a file on the backing store, read and closed (with the last reference)
// through the Env that opened it, which must outlive it. A spill file is ckptfs' own anonymous
// scratch file that holds content evicted from memory before the file was sealed; only spill
// files are ever written through a BackingFile.
class BackingFile {
 public:
  BackingFile(Env& env, int fd, bool spill = false) : env_(env), fd_(fd), spill_(spill) {}
  // A spill file named `name` in the directory `dir_fd` (duplicated): the name goes with the
  // last reference, so that a worker that dies leaves it to the next.
  BackingFile(Env& env, int fd, int dir_fd, std::string name)
      : env_(env), fd_(fd), spill_(true), dir_fd_(fcntl(dir_fd, F_DUPFD_CLOEXEC, 0)),
        name_(std::move(name)) {}
  ~BackingFile() {
    if (dir_fd_ >= 0) {
      (void)env_.Unlink(dir_fd_, name_);
      env_.Close(dir_fd_);
    }
    env_.Close(fd_);
  }
  BackingFile(const BackingFile&) = delete;
  BackingFile& operator=(const BackingFile&) = delete;
  int fd() const { return fd_; }
  bool spill() const { return spill_; }
  // A named spill file's name in the staging directory; empty for any other file.
  const std::string& name() const { return name_; }
  // Reads `length` bytes at `offset`; bytes past the end read as zeros.
  Status Read(char* dst, size_t length, uint64_t offset) const {
    return env_.Read(fd_, dst, length, offset);
  }
  // fstat of the descriptor: the file as it is now.
  Status Stat(struct stat* st) const { return env_.Stat(fd_, "", st); }
  // Copies its first `length` bytes to the same offsets of `to`.
  Status CopyPrefixTo(int to, uint64_t length) const { return env_.Copy(fd_, to, length); }

 private:
  Env& env_;
  const int fd_;
  const bool spill_;
  const int dir_fd_ = -1;
  const std::string name_;
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

// The bytes of a read. Memory segments keep their blocks alive until this is destroyed.
struct ReadData {
  std::vector<ReadSegment> segments;
  std::string owned;  // Served from a string (control files, generated text, fill values).
};

// The bytes of a write read straight into blocks: byte i is at landed.skip + i of `blocks` laid
// end to end (skip < kBlockSize).
struct LandedBytes {
  std::vector<BlockRef> blocks;
  size_t skip = 0;
  size_t size = 0;
  // Copies the bytes to `out` (size bytes).
  void CopyTo(char* out) const;
  // The bytes, copied out (for those written out of line: a special file, a virtual chunk).
  std::string Copied() const;
};

class FileContent {
 public:
  FileContent() = default;
  // Content that is entirely `base` (a file on the backing store of `size` bytes).
  FileContent(std::shared_ptr<BackingFile> base, uint64_t size)
      : size_(size), base_(std::move(base)), base_len_(size) {}

  // Content of `size` bytes held in `blocks` (block index -> block, bytes past `size` zero),
  // and elsewhere in the first `base_len` bytes of `base` (when not null), zeros beyond.
  FileContent(uint64_t size, std::vector<std::pair<uint64_t, BlockRef>> blocks,
              std::shared_ptr<BackingFile> base = nullptr, uint64_t base_len = 0);

  uint64_t size() const { return size_; }
  const BlockMap& blocks() const { return blocks_; }
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

  // Puts bytes [0, length) of `src` (length <= src.size()) at `offset`: whole blocks that line
  // up are shared with `src`, the rest is copied into blocks from `reservation`, which must
  // hold at least BlocksNeededForSplice. Fails only when a base file cannot be read.
  Status Splice(uint64_t offset, const FileContent& src, uint64_t length, Reservation& reservation);
  size_t BlocksNeededForSplice(uint64_t offset, const FileContent& src, uint64_t length) const;

  // Puts the bytes of `landed` at `offset`. When they were read in line with the file's blocks
  // (landed.skip == offset % kBlockSize), each block the write covers whole is taken from
  // landed.blocks (no copy; null there after); the rest is copied into blocks from
  // `reservation`, which must hold at least BlocksNeededForLand(offset, landed). Returns how many
  // blocks it took. Fails only when a base file cannot be read.
  Result<size_t> Land(uint64_t offset, LandedBytes& landed, Reservation& reservation);
  size_t BlocksNeededForLand(uint64_t offset, const LandedBytes& landed) const;

  // Changes the size. Shrinking drops blocks and zeroes a partial tail, which may need one
  // block from `reservation` (when the tail block is shared); growing exposes zeros.
  void Truncate(uint64_t new_size, Reservation& reservation);
  // Blocks Truncate(new_size) may take.
  size_t BlocksNeededForTruncate(uint64_t new_size) const;

  // Drops every block, keeping the bytes readable from `base` (which holds all size() bytes).
  void ReplaceWithBase(std::shared_ptr<BackingFile> base);

  size_t memory_blocks() const { return blocks_.size(); }

  // The CRC32C sums of the bytes written so far (see WrittenSums).
  const WrittenSums& written_sums() const { return sums_; }

  // Spilling (streaming a file larger than memory): the blocks worth moving to a spill file,
  // every full block; then, once their bytes are in `spill` at the same offsets and `spill`
  // holds the base bytes [0, base_len()) and zeros beyond, AdoptSpill drops those blocks and
  // reads them from `spill`. Returns the number of blocks dropped.
  std::vector<std::pair<uint64_t, BlockRef>> SpillCandidates() const;
  size_t AdoptSpill(std::shared_ptr<BackingFile> spill,
                    const std::vector<std::pair<uint64_t, BlockRef>>& spilled);

 private:
  // Fills `dst` (one block at `index`) with base bytes or zeros for the parts of the block
  // that [skip_from, skip_to) will not overwrite.
  Status FillBlock(uint64_t index, char* dst, size_t skip_from, size_t skip_to) const;
  // Sums the written bytes (and zeros) that the summed prefix has reached, while they are in
  // memory.
  void CatchUpSums();

  uint64_t size_ = 0;
  BlockMap blocks_;
  std::shared_ptr<BackingFile> base_;
  uint64_t base_len_ = 0;
  WrittenSums sums_;
};

// Writes every byte of `content` to the same offsets of `fd` (not synced).
Status WriteContentTo(Env& env, int fd, const FileContent& content);

// Offsets and lengths of O_DIRECT writes to backing files are multiples of this.
inline constexpr size_t kDirectAlign = 4096;

// Write requests that put `blocks` (index -> block) of a file of `size` bytes into `fd`, about
// 1 MiB each. With `direct`, lengths are rounded up to 4 KiB (the caller truncates to size).
template <typename BlockRange>
std::vector<WriteRequest> BlockWriteRequests(const BlockRange& blocks, uint64_t size, int fd,
                                             bool direct) {
  constexpr size_t kBlocksPerRequest = 16;
  std::vector<WriteRequest> out;
  uint64_t next = UINT64_MAX;
  for (const auto& [index, block] : blocks) {
    if (out.empty() || index != next || out.back().iov.size() >= kBlocksPerRequest) {
      out.push_back(WriteRequest{fd, index * kBlockSize, {}});
    }
    uint64_t start = index * kBlockSize;
    size_t len = static_cast<size_t>(std::min<uint64_t>(kBlockSize, size - start));
    if (direct) len = (len + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
    out.back().iov.push_back({block.data(), len});
    next = index + 1;
  }
  return out;
}

}  // namespace ckptfs
