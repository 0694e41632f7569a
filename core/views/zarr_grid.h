// ZarrGrid: how a zarr v2 array with large uncompressed chunks is shown with a fine chunk grid.
//
// The real grid is the one .zarray declares; the backing store keeps it. The virtual grid splits
// every real chunk into contiguous byte ranges of at most `threshold` bytes: the axes before the
// split axis get chunk length 1, the split axis length v, the axes after it keep the real length.
// A virtual chunk therefore lies inside exactly one real chunk, because v divides the real chunk
// length along the split axis, or the array has a single real chunk along that axis (then the
// last virtual chunk may reach past the real chunk's end: those bytes are padding beyond the
// array's shape, not stored, read as the fill value). Arrays where no divisor keeps virtual
// chunks at 1/16 of the threshold or more are not served with a fine grid.
//
// Pure functions of the .zarray text; no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"

namespace ckptfs {

// Where a virtual chunk's bytes live.
struct VirtualChunk {
  std::string real_key;
  uint64_t offset = 0;  // In the real chunk.
  uint64_t length = 0;  // Bytes of the virtual chunk file.
  uint64_t stored = 0;  // Bytes of it inside the real chunk (<= length).
  size_t sub = 0;       // Its index among the virtual chunks of its real chunk.
};

class ZarrGrid {
 public:
  // The grid of a .zarray, or why the array is served as plain files (EINVAL with the reason,
  // EBADMSG when the text is not JSON). With `keep`, keeps its virtual chunks where they
  // still fit (a new shape of the same array).
  static Result<ZarrGrid> Parse(std::string_view zarray_text, uint64_t threshold,
                                const ZarrGrid* keep = nullptr);

  // The .zarray clients see: `real_text` with its chunks replaced by the virtual ones.
  std::string VirtualText(std::string_view real_text) const;
  // What the backing store gets for a .zarray a client writes: the text with the chunks
  // translated back when they are this grid's virtual chunks, or nothing when they are not.
  std::optional<std::string> RealText(std::string_view client_text) const;

  // The virtual chunk named `key` (inside the array's shape), if it is one.
  std::optional<VirtualChunk> Virtual(std::string_view key) const;
  // Whether `key` names a real chunk inside the array's shape.
  bool IsRealKey(std::string_view key) const;
  // The virtual chunk `sub` of real chunk `real_key`, if it lies inside the array's shape.
  std::optional<std::string> VirtualKey(std::string_view real_key, size_t sub) const;

  // Same real chunk layout (chunks, dtype, order, separator): real chunks stay valid.
  bool SameLayout(const ZarrGrid& other) const;

  size_t subs_per_chunk() const { return subs_per_chunk_; }
  uint64_t chunk_bytes() const { return chunk_bytes_; }
  uint64_t virtual_chunk_bytes() const { return vchunk_bytes_; }
  // The fill value as the bytes of one element (all zeros when the fill value is null).
  const std::string& fill() const { return fill_; }
  bool zero_fill() const { return fill_.find_first_not_of('\0') == std::string::npos; }
  const std::vector<uint64_t>& chunks() const { return chunks_; }
  const std::vector<uint64_t>& virtual_chunks() const { return vchunks_; }
  const std::string& dtype() const { return dtype_; }

 private:
  std::optional<std::vector<uint64_t>> ParseKey(std::string_view key) const;
  std::string MakeKey(const std::vector<uint64_t>& index) const;

  std::vector<uint64_t> shape_, chunks_, vchunks_;
  std::string dtype_;
  char separator_ = '.';
  size_t itemsize_ = 0;
  size_t split_axis_ = 0;
  std::vector<uint64_t> strides_;  // Bytes per step along each axis inside a real chunk.
  uint64_t chunk_bytes_ = 0;
  uint64_t vchunk_bytes_ = 0;
  size_t subs_along_split_ = 0;  // Virtual chunks per real chunk along the split axis.
  size_t subs_per_chunk_ = 0;
  std::string fill_;
};

// Replaces the numbers of the top-level "chunks" array of a JSON text, keeping every other byte;
// requires them to equal `from`. Nothing when the text has no such array or they differ.
std::optional<std::string> ReplaceChunks(std::string_view text, const std::vector<uint64_t>& from,
                                         const std::vector<uint64_t>& to);

}  // namespace ckptfs
