// TensorGrid: how a tensor saved as shards (boxes of the global tensor, each stored row-major) is
// shown as a zarr v2 array: the chunk grid, and where each chunk's bytes come from.
//
// The grid is the shards' own when they form one (equal sizes along each axis, the last one at
// the array's edge possibly shorter); otherwise the finest grid whose cells each lie inside one
// shard (per axis, the gcd of the shards' boundaries); and when that makes more than kMaxChunks
// chunks, one chunk of the whole tensor. A chunk is zarr's full chunk shape: parts past the
// array's edge, and parts no shard holds, read as zeros. Pure functions; no I/O.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ckptfs {

struct Box {
  std::vector<uint64_t> offsets, sizes;
};

struct TensorGrid {
  enum class Kind { kShards, kFinest, kWhole };
  Kind kind = Kind::kShards;
  std::vector<uint64_t> chunks;  // The chunk shape.
  // Chunks along each axis.
  std::vector<uint64_t> counts;
  uint64_t total_chunks() const;
  const char* name() const;
};

inline constexpr uint64_t kMaxChunks = 1 << 16;

TensorGrid ChooseGrid(const std::vector<uint64_t>& shape, const std::vector<Box>& shards);

// A run of a chunk's bytes: bytes [offset, offset + length) of shard `shard`'s storage, or zeros
// when shard is kZeros.
struct Piece {
  static constexpr int64_t kZeros = -1;
  int64_t shard = kZeros;
  uint64_t offset = 0;
  uint64_t length = 0;
};

inline constexpr uint64_t kMaxRowVisits = uint64_t{1} << 26;

// The pieces of the chunk at grid position `index`, in order, neighbours merged; nullopt when
// working them out would visit more than kMaxRowVisits (rows x shards).
std::optional<std::vector<Piece>> ChunkPieces(const std::vector<uint64_t>& shape, size_t itemsize,
                                              const TensorGrid& grid, const std::vector<uint64_t>& index,
                                              const std::vector<Box>& shards);

// zarr's key of the chunk at `index` ("0" for a 0-d array).
std::string ChunkKey(const std::vector<uint64_t>& index);

}  // namespace ckptfs
