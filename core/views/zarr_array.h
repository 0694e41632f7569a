// A zarr array served with a fine chunk grid (see ZarrGrid): its directory shows the .zarray
// with virtual chunks and one file per virtual chunk; the real chunk files are hidden inodes
// that hold the bytes, are journaled and reach the backing store whole under their real names.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tree/inode.h"
#include "core/views/zarr_grid.h"

namespace ckptfs {

// Guarded by the namespace lock.
struct ZarrArray {
  explicit ZarrArray(ZarrGrid g) : grid(std::move(g)) {}

  struct Chunk {
    InodeRef file;              // Named (dir, real key) but not among the directory's children.
    std::vector<bool> present;  // Which of its virtual chunks exist, by VirtualChunk::sub.
  };
  ZarrGrid grid GUARDED_BY(ns_lock);
  std::map<std::string, Chunk> chunks GUARDED_BY(ns_lock);  // By real key.
  // Backing entries not shown: shadowed by virtual names or of a wrong size.
  size_t hidden GUARDED_BY(ns_lock) = 0;
};

// Immutable; replaced as a whole.
struct ChunkView {
  InodeRef real;  // The real chunk file.
  VirtualChunk chunk;
  std::string fill;  // One element of the fill value.
};

}  // namespace ckptfs
