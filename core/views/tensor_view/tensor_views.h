// TensorViews: the read-only directory `.tensors` of a checkpoint directory, computed from the
// checkpoint's own files: for a DCP / torch_dist checkpoint (a sealed `.metadata`), one zarr v2
// array per tensor and one file per byte item (core/views/tensor_view/dcp_view.h); for each
// torch.save file (*.pt, *.pth, *.bin), a directory of its nested keys and tensors
// (core/views/tensor_view/torch_save_view.h); `info.json` and `.zgroup` at the top. Tensor bytes
// are ranges of the checkpoint's files, read where they are (memory or backing store), never
// copied.
//
// `.tensors` is found by name only (listings of the checkpoint never show it, so copies and
// loaders never see it). Its files are sealed ones (closed or fsynced). It is built again, with
// new node numbers, when a file it reads has changed since or the directory has other entries;
// nodes of a replaced view are unknown (ESTALE: the kernel looks the path up again). A view's
// files have no blocks, so `du` of a checkpoint counts what is stored.
//
// Thread-safe. Lock order: the namespace lock, then Inode::mu, then this class's lock; a build
// holds its own lock (never with the namespace lock) before Inode::mu and this class's lock.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/memory/file_content.h"
#include "core/tree/inode.h"
#include "core/tree/namespace.h"
#include "core/views/tensor_view/view_tree.h"
#include "iouring/env.h"

namespace ckptfs {

inline constexpr const char* kTensorViewName = ".tensors";
// Node numbers of views: kTensorViewInoBit (core/tree/namespace.h), the view's serial above bit 32,
// the node's index below.

class TensorViews {
 public:
  // What a view's file was when the view was built: a change of any (another mount's rewrite
  // in shared mode changes size or time only) makes the view out of date.
  struct Stamp {
    uint64_t version = 0;
    uint64_t size = 0;
    int64_t mtime_ns = 0;
    bool operator==(const Stamp&) const = default;
  };
  static Stamp StampOf(const Inode& inode) REQUIRES(inode.mu);
  // A file of the checkpoint directory as a build reads it: taken under the namespace lock.
  struct SourceFile {
    InodeRef inode;
    std::string name;
    Stamp stamp;
    FileContent content;  // Its bytes when taken.
  };
  struct Checkpoint {
    InodeRef dir;
    std::string path;  // For logs and info.json.
    size_t dir_entries = 0;
    std::vector<SourceFile> files;  // .metadata, the .distcp files, the torch.save files.
    int32_t metadata = -1;          // Which of them is .metadata.
  };
  class View;
  struct OpenView;

  // Reads of backing files are advised through `env` (read ahead of sequential readers).
  TensorViews(Namespace& ns, Env& env) : ns_(ns), env_(env) {}

  // The view of `dir`: its root's attributes when a view is built and still current; else what
  // a build needs (taken with the namespace lock held), or ENOENT when `dir` holds no sealed
  // `.metadata`.
  struct Found {
    std::optional<Attr> root;
    Checkpoint checkpoint;
  };
  Result<Found> FindLocked(const InodeRef& dir) REQUIRES(ns_lock);
  // Builds the view of `checkpoint` (without the namespace lock: reads its files) and returns
  // its root's attributes.
  Result<Attr> Build(Checkpoint checkpoint);

  Result<Attr> Lookup(uint64_t parent, const std::string& name);
  Result<Attr> GetAttr(uint64_t ino);
  // The entries of view directory `ino`, "." and ".." included.
  Result<std::vector<DirEntry>> List(uint64_t ino);
  // EROFS for writing; EISDIR for a directory.
  Result<std::shared_ptr<const OpenView>> Open(uint64_t ino, int flags);
  // A source file whose backing file a read takes bytes of.
  struct BackingSource {
    InodeRef inode;
    std::shared_ptr<BackingFile> file;
  };
  // With `backing` given, appends the sources whose backing files the read takes bytes of (once
  // each, in the order read).
  Result<ReadData> Read(const OpenView& file, uint64_t offset, size_t size,
                        std::vector<BackingSource>* backing = nullptr);
  static Attr AttrOf(const OpenView& file);
  // Whether its content is made at open (info.json) rather than fixed.
  static bool Generated(const OpenView& file);

  // Number of views held (for the stats).
  size_t size() const;

 private:
  // The view and node index of `ino`, or ESTALE.
  Result<std::pair<std::shared_ptr<const View>, uint32_t>> Node(uint64_t ino) const;

  // The segments of [from, to) of view file `node`, appended to `out` (and the sources read from
  // their backing files to `backing`, when given); ESTALE when a source changed since the view
  // was built.
  Status SegmentsLocked(const View& view, const ViewNode& node, uint64_t from, uint64_t to,
                        std::vector<ReadSegment>& out,
                        std::vector<BackingSource>* backing = nullptr) REQUIRES(ns_lock);

  Namespace& ns_;
  Env& env_;
  Mutex build_mu_;  // Held by a build (without the namespace lock), before mu_.
  mutable Mutex mu_;
  uint64_t next_serial_ GUARDED_BY(mu_) = 1;
  std::unordered_map<uint64_t, std::shared_ptr<const View>> by_serial_ GUARDED_BY(mu_);
  std::map<const Inode*, uint64_t> by_dir_ GUARDED_BY(mu_);
};

}  // namespace ckptfs
