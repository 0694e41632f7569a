// The CRC32C of a file's bytes, kept as they are written: one sum per piece of kPiece bytes of
// the prefix written so far, summed right after each write copied its bytes (still in the CPU's
// caches), so that summing a version at flush reads again only what was not summed then.
//
// Bytes written beyond the summed prefix (out of order, as the kernel's parallel direct writes
// arrive) wait as pending ranges until the prefix reaches them. A change inside the prefix
// (rewrite, truncation) takes the prefix back: within the last piece to the step of kStep bytes
// before the change, the bytes after it pending again (a page rewritten as a writer through the
// page cache appends costs at most a step summed again); into an earlier piece to the start of
// that piece, the rest left to the flush.
//
// Not thread-safe: its FileContent's owner guards it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "core/memory/crc32c.h"

namespace ckptfs {

class WrittenSums {
 public:
  static constexpr uint64_t kPiece = uint64_t{8} << 20;
  static constexpr uint64_t kStep = uint64_t{64} << 10;
  // More pending ranges than this are forgotten (from the farthest), left to the flush.
  static constexpr size_t kMaxPending = 16;

  // Bytes [offset, offset + length) now hold `data` (zeros when `data` is null).
  void Written(uint64_t offset, const char* data, size_t length);
  // Bytes [offset, offset + length) changed without passing through Written (shared blocks).
  void Changed(uint64_t offset, uint64_t length);
  // The file shrank to `size` bytes.
  void Truncated(uint64_t size);

  // The range of written bytes now next to the summed prefix, to be passed to Written by the
  // content that holds them, or nothing. Forget() when they can no longer be read from memory.
  std::optional<std::pair<uint64_t, uint64_t>> NextToCatchUp() const;
  void ForgetPending() { pending_.clear(); }

  // Bytes [0, summed()) are summed: sums of its whole pieces, and of the bytes after them.
  uint64_t summed() const { return summed_; }
  const std::vector<uint32_t>& piece_sums() const { return piece_sums_; }
  uint32_t partial_piece_sum() const { return partial_.value(); }

 private:
  // Forgets the sums of bytes from `offset` on (see above).
  void RollBack(uint64_t offset);
  void AddPending(uint64_t begin, uint64_t end);
  void Sum(const char* data, size_t length);

  uint64_t summed_ = 0;
  std::vector<uint32_t> piece_sums_;
  Crc32c partial_;
  // The sum of the last piece's first k steps (k >= 1; none is the empty sum), for each step the
  // prefix has reached in it: small files never allocate it.
  std::vector<Crc32c> steps_;
  std::vector<std::pair<uint64_t, uint64_t>> pending_;  // Sorted, disjoint, beyond summed_.
};

}  // namespace ckptfs
