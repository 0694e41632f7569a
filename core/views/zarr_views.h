// ZarrViews: zarr arrays served with a fine chunk grid (core/views/zarr_array.h,
// core/views/zarr_grid.h). Which directories are served with one, the files that show their virtual
// chunks and .zarray, how reads and writes of those reach the real chunks, and how clients' renames
// and unlinks of them change the real chunks.
//
// Lives in the Namespace as its DirectoryKind: called with the namespace lock held (the *Locked
// methods), or with the view's real chunk locked (reads and writes of a view).
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/base/config.h"
#include "core/memory/arena.h"
#include "core/memory/file_content.h"
#include "core/tree/namespace.h"
#include "core/views/zarr_array.h"

namespace ckptfs {

// A virtual chunk or the shown .zarray of a fine-grid array.
inline bool IsZarrViewLocked(const Inode& inode) REQUIRES(inode.mu) {
  return inode.view || !inode.served_text.empty();
}
// The same; takes inode.mu.
bool IsZarrView(const Inode& inode);

class ZarrViews final : public Namespace::DirectoryKind {
 public:
  // Registers itself as `ns`'s DirectoryKind.
  ZarrViews(const Config& config, Env& env, Namespace& ns);

  // Serves `dir`, just found on the backing store, with a fine grid when its .zarray qualifies.
  void FoundLocked(const InodeRef& dir) override REQUIRES(ns_lock);
  // Adds the backing entry `name` of a fine-grid directory being loaded, when it is the array's
  // (a real chunk, or hidden); false for an ordinary child.
  bool TakeBackingEntryLocked(const InodeRef& dir, const std::string& name) override
      REQUIRES(ns_lock);
  // EPERM for a virtual chunk's name: it comes into being only by zarr's rename over it.
  Status MayCreateLocked(const InodeRef& dir, const std::string& name) override
      REQUIRES(ns_lock);

  // Opens a view (a virtual chunk, or a served .zarray) for `flags`, counting the open on a
  // virtual chunk's real chunk; O_TRUNC of a virtual chunk fills it, or sets `more` to the
  // blocks that needs when `reservation` holds fewer.
  struct Opened {
    bool text = false;           // A served .zarray: its reads must bypass the page cache.
    uint64_t wrote_version = 0;  // The real chunk's version the open wrote (0: none).
  };
  Result<Opened> OpenLocked(const InodeRef& inode, int flags, Reservation& reservation,
                            size_t& more) REQUIRES(ns_lock);
  // Reads of a view (`inode`->view or served_text set).
  static Result<ReadData> Read(const Inode& inode, uint64_t offset, size_t size);
  // Where a write of [offset, offset + size) to virtual chunk `view` goes in its real chunk:
  // bytes past the real chunk's end are padding beyond the array's shape and are not stored.
  struct Target {
    uint64_t offset = 0;
    size_t size = 0;
  };
  static Result<Target> WriteTarget(const ChunkView& view, uint64_t offset, size_t size);

  // rename(src_dir/src_name = `file`, dst/new_name), before anything changed: Ok with
  // `*handled` when the rename was a virtual chunk's and is done; an error to refuse it.
  Status RenameLocked(const InodeRef& src_dir, const std::string& src_name, const InodeRef& file,
                      const InodeRef& dst, const std::string& new_name, bool* handled,
                      Reservation& reservation, size_t& more) REQUIRES(ns_lock);
  // After a rename of regular file `file` from `src_dir`/`src_name` to `dst`/`new_name`: a new
  // .zarray takes or keeps a fine grid.
  void RenamedLocked(const InodeRef& src_dir, const std::string& src_name, const InodeRef& file,
                     const InodeRef& dst, const std::string& new_name, Reservation& reservation)
      REQUIRES(ns_lock);
  // unlink of virtual chunk `key` (`view`) of `dir`.
  Status UnlinkLocked(const InodeRef& dir, const std::string& key, const InodeRef& view,
                      Reservation& reservation, size_t& more) REQUIRES(ns_lock);
  // rmdir of `dir`, which has no children: ENOTEMPTY while backing entries are hidden.
  Status RmdirLocked(const InodeRef& dir) REQUIRES(ns_lock);
  // Serves `dir` as a plain directory again once neither chunks nor .zarray are left.
  void ForgetIfGoneLocked(const InodeRef& dir) REQUIRES(ns_lock);

  // The fine-grid arrays for .ckptfs/stats, as a JSON array.
  nlohmann::json StatsLocked() const REQUIRES(ns_lock);

 private:
  // Starts serving `dir` with a fine grid once zarr has renamed a qualifying .zarray into it,
  // unless chunk files were written there before.
  void AdoptLocked(const InodeRef& dir, const InodeRef& zarray) REQUIRES(ns_lock);
  // Whether `dir` can serve the grid of `text` (fill values need memory for whole chunks).
  std::optional<ZarrGrid> GridFor(const InodeRef& dir, const std::string& text,
                                  const ZarrGrid* keep = nullptr) const REQUIRES(ns_lock);
  // Shows sub-chunk `sub` of real chunk `real_key` as a file named by its virtual key.
  void ShowLocked(const InodeRef& dir, const std::string& real_key, size_t sub)
      REQUIRES(ns_lock);
  // rename(`src_dir`/`src_name` = `file`, `dir`/`key`) where `key` is a virtual chunk: the bytes
  // go into the real chunk and `file` becomes the virtual chunk.
  Status RenameInLocked(const InodeRef& src_dir, const std::string& src_name,
                        const InodeRef& file, const InodeRef& dir, const std::string& key,
                        const VirtualChunk& vc, Reservation& reservation, size_t& more)
      REQUIRES(ns_lock);
  // Checks a .zarray renamed over the one of fine-grid `dir` before the rename; after it,
  // ZarrayReplacedLocked stores the real text and takes the new grid.
  Status CheckZarrayLocked(const InodeRef& dir, const InodeRef& file, Reservation& reservation,
                           size_t& more) REQUIRES(ns_lock);
  void ZarrayReplacedLocked(const InodeRef& dir, const InodeRef& zarray,
                            Reservation& reservation) REQUIRES(ns_lock);
  // Removes real chunk `real_key` (all its virtual chunks are gone).
  void RemoveChunkLocked(const InodeRef& dir, const std::string& real_key) REQUIRES(ns_lock);
  // Sets [offset, offset + length) of a real chunk to the fill value (`real`->mu held).
  static Status Fill(Inode& real, uint64_t offset, uint64_t length, const std::string& fill,
                     Reservation& reservation) REQUIRES(real.mu);
  // Fills the range of a virtual chunk (its real chunk loaded), or sets `more` to the blocks that
  // needs when `reservation` holds fewer.
  static Status FillView(const ChunkView& view, Reservation& reservation, size_t& more);
  static Result<ReadData> ReadChunk(const ChunkView& view, uint64_t offset, size_t size);

  const Config& config_;
  Env& env_;
  Namespace& ns_;
  // Directories served with a fine grid.
  std::vector<std::weak_ptr<Inode>> dirs_ GUARDED_BY(ns_lock);
};

}  // namespace ckptfs
