// The kernel state record of a worker (core/recovery/kernel_state_record.h), kept by KernelStateKeeper,
// taken over by the next worker after a crash.
#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <mutex>
#include <unordered_map>

#include "core/filesystem/filesystem.h"
#include "core/filesystem/worker_takeover.h"
#include "core/recovery/rescue.h"

namespace ckptfs {
namespace {

bool Writable(int flags) { return (flags & O_ACCMODE) != O_RDONLY; }

// Whether `a` and `b` are made of the same blocks at the same indices over the same base: then
// they hold the same bytes (a write to a block a sealed version shares copies it first).
bool SameBlocks(const FileContent& a, const FileContent& b) {
  if (a.size() != b.size() || a.base() != b.base() || a.base_len() != b.base_len() ||
      a.memory_blocks() != b.memory_blocks()) {
    return false;
  }
  for (auto ia = a.blocks().begin(), ib = b.blocks().begin(); ia != a.blocks().end();
       ++ia, ++ib) {
    if ((*ia).first != (*ib).first || (*ia).second.slot() != (*ib).second.slot()) return false;
  }
  return true;
}

}  // namespace

void WorkerTakeover::RecoverKernelState(const KernelStateRecord::State& state, Adopted& adopted) {
  NamespaceLock lock(ns_.mutex());
  std::unordered_map<uint64_t, InodeRef> nodes;  // The crashed worker's node -> the inode now.
  size_t files = 0, lost = 0;
  uint64_t bytes = 0;
  // The recorded directories (node id -> entry) and where each is now, found from the root
  // through its recorded ancestors, each looked up once.
  std::unordered_map<uint64_t, const KernelStateRecord::Node*> directories;
  for (const KernelStateRecord::Node& n : state.nodes) {
    if (n.directory) directories.emplace(n.ino, &n);
  }
  std::unordered_map<uint64_t, Result<InodeRef>> found_dirs;
  auto directory_now = [&](uint64_t ino) REQUIRES(ns_lock) -> Result<InodeRef> {
    std::vector<const KernelStateRecord::Node*> chain;  // Up to the root or one found before.
    uint64_t at = ino;
    Result<InodeRef> found = ns_.FindLocked(kRootIno);
    while (at != kRootIno) {
      if (auto before = found_dirs.find(at); before != found_dirs.end()) {
        found = before->second;
        break;
      }
      auto dir = directories.find(at);
      // At most one step per node: a cycle is not what a worker wrote.
      if (dir == directories.end() || dir->second->name.empty() ||
          chain.size() == state.nodes.size()) {
        found = Status::Error(ENOENT, "a directory above it was not recorded");
        break;
      }
      chain.push_back(dir->second);
      at = dir->second->parent;
    }
    for (auto it = chain.rbegin(); it != chain.rend(); ++it) {
      if (found.ok()) found = ns_.ChildLocked(*found, (*it)->name);
      if (found.ok() && (*found)->type != FileType::kDirectory) {
        found = Status::Error(ENOTDIR, (*it)->name);
      }
      found_dirs.insert_or_assign((*it)->ino, found);
    }
    return found;
  };
  auto path_of = [&](const KernelStateRecord::Node& n) {
    const std::string path = state.PathOf(n);
    return path.empty() ? n.name : path;
  };
  // Files open for writing first: a file made and never sealed is made again before the other
  // nodes of it (an earlier worker's) are looked up.
  std::vector<const KernelStateRecord::Node*> order;
  for (const KernelStateRecord::Node& n : state.nodes) {
    if (n.content) order.push_back(&n);
  }
  for (const KernelStateRecord::Node& n : state.nodes) {
    if (!n.content) order.push_back(&n);
  }
  for (const KernelStateRecord::Node* node : order) {
    const KernelStateRecord::Node& n = *node;
    if (n.name.empty() && !n.content) continue;  // Removed, open for reading: its handles fail.
    Result<InodeRef> dir =
        n.name.empty() ? Status::Error(ENOENT, "removed") : directory_now(n.parent);
    Result<InodeRef> found = dir.ok() ? ns_.ChildLocked(*dir, n.name) : dir.status();
    if (n.directory) {
      if (found.ok() && (*found)->type == FileType::kDirectory) nodes[n.ino] = *found;
      continue;
    }
    Result<FileContent> content = n.content ? RecordedContent(n, adopted) : FileContent();
    if (!content.ok()) {
      spdlog::error("recovery: {}: {}; its handles fail", path_of(n),
                    content.status().ToString());
      ++lost;
      continue;
    }
    InodeRef inode = found.ok() && (*found)->type == FileType::kRegular ? *found : nullptr;
    if (n.name.empty()) {
      // Removed while open for writing: nameless as long as its handles are open, as it was.
      inode = ns_.NewInodeLocked(FileType::kRegular, n.mode, Caller{n.uid, n.gid, 0});
      inode->nlink = 0;
    } else if (dir.ok() && !found.ok() && found.status().err() == ENOENT && n.content) {
      // Made through the mount and never sealed.
      inode = ns_.NewInodeLocked(FileType::kRegular, n.mode, Caller{n.uid, n.gid, 0});
      ns_.AddNameLocked(*dir, n.name, inode);
    }
    if (!inode) {
      spdlog::error("recovery: the open file {} cannot be found again: {}", path_of(n),
                    found.ok() ? "not a regular file" : found.status().ToString());
      lost += n.content;
      continue;
    }
    if (n.content) {
      inode->origin_dir.reset();
      inode->origin_name.clear();
      MutexLock ilock(inode->mu);
      // Closed (sealed) before the crash and not changed since, its handle released only
      // after it: the version the log replayed is this content. Sealed again, it would
      // supersede that version, which a commit that came after the close may be waiting for.
      const bool sealed = adopted.replayed.count(inode->ino) > 0 &&
                          inode->version == inode->sealed_version &&
                          SameBlocks(inode->content, *content);
      inode->content = std::move(*content);
      inode->mode = n.mode;
      inode->uid = n.uid;
      inode->gid = n.gid;
      // Unsealed: its next seal publishes it.
      if (!sealed) inode->version = inode->sealed_version + 1;
      ++files;
      bytes += n.size;
    } else if (Status loaded = ns_.LoadOriginLocked(inode); !loaded.ok()) {
      spdlog::error("recovery: {}: {}", path_of(n), loaded.ToString());
      continue;
    }
    nodes[n.ino] = inode;
  }
  for (const auto& [old_ino, inode] : nodes) {
    if (old_ino != inode->ino) ns_.AliasLocked(old_ino, inode);
  }
  size_t handles = 0, lost_handles = 0;
  for (const KernelStateRecord::Handle& r : state.handles) {
    auto node = nodes.find(r.ino);
    if (node == nodes.end() || node->second->type != FileType::kRegular ||
        handles_.IsEarlier(r.fh)) {
      ++lost_handles;
      continue;
    }
    const InodeRef& inode = node->second;
    auto h = std::make_unique<Handle>(FileHandle(inode), r.flags);
    FileHandle& f = *h->file();
    f.request = r.request;
    if (r.request != 0) handles_.NoteOpenedByLocked(r.request, r.fh);
    {
      MutexLock ilock(inode->mu);
      if (Writable(r.flags)) f.wrote_version = inode->version;
      inode->cached_handles++;
    }
    AdoptEarlierHandleLocked(std::move(h), r.fh);
    ++handles;
  }
  kernel_state_.RecordAllLocked();
  stats_.recovered_handles += handles;
  stats_.recovered_open_bytes += bytes;
  if (state.nodes.empty() && state.handles.empty() && state.refused == 0) return;
  spdlog::info("recovered what the kernel held of the previous worker: {} nodes, {} open "
               "handles, {} files open for writing ({} bytes){}",
               nodes.size(), handles, files, bytes,
               lost + lost_handles + state.refused > 0
                   ? fmt::format("; lost: {} files, {} handles, {} malformed entries", lost,
                                 lost_handles, state.refused)
                   : "");
}

Result<FileContent> WorkerTakeover::RecordedContent(const KernelStateRecord::Node& n,
                                                Adopted& adopted) {
  if (n.base.other_file) {
    return Status::Error(EIO, "what was written to it while open was partly in a file that "
                              "cannot be named");
  }
  std::shared_ptr<BackingFile> spill;
  if (!n.base.spill.empty()) {
    Result<std::shared_ptr<BackingFile>> file = AdoptSpillFile(n.base.spill, adopted);
    if (!file.ok()) {
      return Status::Error(file.status().err(), "its spill file: " + file.status().ToString());
    }
    spill = *file;
  }
  std::vector<std::pair<uint64_t, BlockRef>> blocks;
  for (const auto& [index, slot] : n.blocks) blocks.emplace_back(index, adopted.blocks[slot]);
  return FileContent(n.size, std::move(blocks), std::move(spill), n.base.length);
}

Status WorkerTakeover::RescueOpenFiles(const KernelStateRecord::State& state, Adopted& adopted) {
  std::vector<UnflushedFile> files;
  uint64_t bytes = 0;
  for (const KernelStateRecord::Node& n : state.nodes) {
    if (!n.content || n.name.empty()) continue;  // Removed while open: nobody can reach it.
    // A file whose directories were not recorded is rescued by its name alone.
    const std::string path = state.PathOf(n);
    Result<FileContent> content = RecordedContent(n, adopted);
    if (!content.ok()) {
      spdlog::error("recovery: {}, open for writing, cannot be rescued: {}",
                    path.empty() ? n.name : path, content.status().ToString());
      continue;
    }
    files.push_back({path.empty() ? n.name : path, std::move(*content)});
    bytes += n.size;
  }
  if (!files.empty()) {
    Result<std::string> where =
        SaveToRescueDirectory(*env_, root_fd_, config_.backing_dir, files);
    if (!where.ok()) {
      return Status::Error(where.status().err(), "cannot save the " +
                                                     std::to_string(files.size()) +
                                                     " files open for writing: " +
                                                     where.status().ToString());
    }
    spdlog::warn("{} files were open for writing, never closed ({} bytes): what they held is in "
                 "{}, not published", files.size(), bytes, *where);
  }
  kernel_state_.record()->Clear();
  return Status::Ok();
}

}  // namespace ckptfs
