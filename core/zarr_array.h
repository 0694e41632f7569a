// A zarr array served with a fine chunk grid (see ZarrGrid): its directory shows the .zarray
// with virtual chunks and one file per virtual chunk; the real chunk files are hidden inodes
// that hold the bytes, are journaled and reach the backing store whole under their real names.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/inode.h"
#include "core/zarr_grid.h"

namespace ckptfs {

// Guarded by Filesystem::ns_mu_.
struct ZarrArray {
  explicit ZarrArray(ZarrGrid g) : grid(std::move(g)) {}

  struct Chunk {
    InodeRef file;              // Named (dir, real key) but not among the directory's children.
    std::vector<bool> present;  // Which of its virtual chunks exist, by VirtualChunk::sub.
  };
  ZarrGrid grid;
  std::map<std::string, Chunk> chunks;  // By real key.
  size_t hidden = 0;  // Backing entries not shown: shadowed by virtual names or of a wrong size.
};

// Immutable; replaced as a whole.
struct ChunkView {
  InodeRef real;  // The real chunk file.
  VirtualChunk chunk;
  std::string fill;  // One element of the fill value.
};

}  // namespace ckptfs
