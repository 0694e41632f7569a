// The kernel state record of a worker (core/kernel_state_record.h): kept current as the kernel
// gets nodes and handles and files change, and taken over by the next worker after a crash.
#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <mutex>
#include <unordered_map>

#include "core/filesystem.h"
#include "core/rescue.h"

namespace ckptfs {
namespace {

void WarnRecordFull() {
  static std::once_flag warned;
  std::call_once(warned, [] {
    spdlog::warn("the kernel state record is full: nodes and open files beyond it go stale if "
                 "this worker crashes");
  });
}

void WarnRecordRefuses() {
  static std::once_flag warned;
  std::call_once(warned, [] {
    spdlog::warn("the kernel state record holds {} directories and open files, or {} handles: "
                 "further lookups and opens fail with ENFILE until some are closed or "
                 "forgotten (stats: kernel_record_refused)",
                 KernelStateRecord::kNodes / 2, KernelStateRecord::kHandles / 2);
  });
}

bool Writable(int flags) { return (flags & O_ACCMODE) != O_RDONLY; }

}  // namespace

Status Filesystem::RoomInRecordLocked(const Inode* node, size_t handles) {
  if (!kernel_record_) return Status::Ok();
  size_t nodes = 1;
  if (node) {
    MutexLock ilock(node->mu);
    if (node->record >= 0) nodes = 0;
  }
  if (kernel_record_->HasRoom(nodes, handles)) return Status::Ok();
  stats_.kernel_record_refused++;
  WarnRecordRefuses();
  return Status::Error(ENFILE, "the kernel state record is full");
}

void Filesystem::RecordNodeLocked(const InodeRef& inode) {
  if (!kernel_record_) return;
  // Its directories not recorded yet go first, the highest first (an entry names its
  // directory's): no recursion however deep the tree.
  std::vector<InodeRef> unrecorded;
  for (InodeRef at = inode; at && at->ino != kRootIno;
       at = at->names.empty() ? nullptr : at->names.begin()->parent) {
    MutexLock ilock(at->mu);
    if (at->record >= 0) break;
    unrecorded.push_back(at);
  }
  for (auto it = unrecorded.rbegin(); it != unrecorded.rend(); ++it) RecordOneLocked(*it);
  // Recorded under an earlier worker's node id while the kernel holds its own too (it looked
  // it up again): recorded under both.
  if (inode->lookups > 0 && inode->ino != kRootIno) {
    {
      MutexLock ilock(inode->mu);
      if (inode->record < 0 || inode->record_ino == inode->ino) return;
    }
    RecordAliasLocked(inode->ino, inode);
  }
}

void Filesystem::RecordOneLocked(const InodeRef& inode) {
  // Recorded once, under the node id the kernel knows it by: an earlier worker's when it has
  // one (so a takeover records no more entries than it found).
  uint64_t ino = inode->ino;
  int entry;
  if (auto alias = alias_ids_.find(inode.get()); alias != alias_ids_.end()) {
    ino = alias->second;
    RecordAliasLocked(ino, inode);
    auto recorded = alias_records_.find(ino);
    entry = recorded == alias_records_.end() ? -1 : recorded->second;
  } else {
    entry = AddRecordLocked(ino, inode);
  }
  if (entry < 0) return;
  MutexLock ilock(inode->mu);
  inode->record = entry;
  inode->record_ino = ino;
}

int Filesystem::AddRecordLocked(uint64_t ino, const InodeRef& inode) {
  uint64_t parent = 0;
  std::string name;
  if (!inode->names.empty()) {
    parent = RecordedDirLocked(inode->names.begin()->parent);
    name = inode->names.begin()->name;
  }
  const int entry =
      kernel_record_->AddNode(ino, inode->type == FileType::kDirectory, parent, name);
  if (entry < 0) {
    WarnRecordFull();
    return -1;
  }
  recorded_.emplace(entry, inode);
  return entry;
}

uint64_t Filesystem::RecordedDirLocked(const InodeRef& dir) {
  if (dir->ino == kRootIno) return kRootIno;
  RecordNodeLocked(dir);
  MutexLock ilock(dir->mu);
  return dir->record >= 0 ? dir->record_ino : dir->ino;
}

void Filesystem::RecordAliasLocked(uint64_t ino, const InodeRef& inode) {
  if (alias_records_.count(ino) > 0) return;
  const int entry = AddRecordLocked(ino, inode);
  if (entry >= 0) alias_records_[ino] = entry;
}

void Filesystem::RecordHandleLocked(Handle& handle) {
  FileHandle* h = handle.file();
  if (!kernel_record_ || !h || IsZarrView(*h->inode)) return;
  RecordNodeLocked(h->inode);
  if (Writable(handle.flags)) {
    MutexLock ilock(h->inode->mu);
    if (h->inode->record >= 0) {
      h->inode->content_recorded = true;
      RecordContentLocked(*h->inode);
    }
  }
  uint64_t ino;
  {
    MutexLock ilock(h->inode->mu);
    ino = h->inode->record >= 0 ? h->inode->record_ino : h->inode->ino;
  }
  h->record = kernel_record_->AddHandle(handle.number, ino, handle.flags, h->request);
  if (h->record < 0) WarnRecordFull();
}

void Filesystem::UnrecordHandleLocked(FileHandle& h) {
  if (!kernel_record_) return;
  if (h.record >= 0) kernel_record_->RemoveHandle(h.record);
  h.record = -1;
  // Its last handle: a closed file's node id needs no record (the kernel looks it up again).
  if (h.inode->open_handles == 1) UnrecordNodeLocked(*h.inode);
}

void Filesystem::UnrecordNodeLocked(Inode& inode) {
  if (!kernel_record_) return;
  // Its own node id, recorded beside an earlier worker's (an earlier worker's ids are never
  // this worker's).
  if (auto own = alias_records_.find(inode.ino); own != alias_records_.end()) {
    kernel_record_->RemoveNode(own->second);
    recorded_.erase(own->second);
    alias_records_.erase(own);
  }
  MutexLock ilock(inode.mu);
  if (inode.record < 0) return;
  if (auto alias = alias_records_.find(inode.record_ino);
      alias != alias_records_.end() && alias->second == inode.record) {
    // An earlier worker's node id of it: kept until the kernel forgets that.
    kernel_record_->EndContent(inode.record);
  } else {
    kernel_record_->RemoveNode(inode.record);
    recorded_.erase(inode.record);
  }
  inode.record = -1;
  inode.content_recorded = false;
}

void Filesystem::RecordContentLocked(Inode& inode) {
  if (inode.record < 0 || !inode.content_recorded) return;
  KernelStateRecord::Base base;
  if (const std::shared_ptr<BackingFile>& file = inode.content.base()) {
    base.other_file = file->name().empty();
    base.spill = file->name();
    base.length = inode.content.base_len();
  }
  const uint64_t stamp = kernel_record_->BeginContent(inode.record, inode.content.size(), base,
                                                      inode.mode, inode.uid, inode.gid);
  for (const auto& [index, block] : inode.content.blocks()) {
    kernel_record_->Tag(block.slot(), inode.record_ino, index, stamp);
  }
}

void Filesystem::RecordWriteLocked(Inode& inode, uint64_t offset, uint64_t length) {
  if (inode.record < 0 || !inode.content_recorded || length == 0) return;
  const uint64_t stamp = kernel_record_->NextStamp();
  for (uint64_t i = offset / kBlockSize; i <= (offset + length - 1) / kBlockSize; ++i) {
    if (const BlockRef* block = inode.content.blocks().Find(i)) {
      kernel_record_->Tag(block->slot(), inode.record_ino, i, stamp);
    }
  }
  kernel_record_->SetSize(inode.record, inode.content.size());
}

void Filesystem::RecordPlaceLocked(const InodeRef& changed) {
  if (recorded_.empty()) return;
  std::vector<int> entries;
  {
    MutexLock ilock(changed->mu);
    if (changed->record >= 0) entries.push_back(changed->record);
  }
  for (const auto& [ino, entry] : alias_records_) {
    if (recorded_.at(entry) == changed) entries.push_back(entry);
  }
  // Its recorded children name it by its node id: only its own entries change. Removed, it
  // has no name (a directory's node is stale; a file goes on nameless while open).
  for (int entry : entries) {
    if (changed->names.empty()) {
      kernel_record_->SetName(entry, 0, "");
    } else {
      const Inode::Name& name = *changed->names.begin();
      kernel_record_->SetName(entry, RecordedDirLocked(name.parent), name.name);
    }
  }
}

void Filesystem::RecordAllLocked() {
  if (!kernel_record_) return;
  for (auto& [entry, inode] : recorded_) {
    MutexLock ilock(inode->mu);
    inode->record = -1;
    inode->content_recorded = false;
  }
  recorded_.clear();
  alias_records_.clear();
  alias_ids_.clear();
  // Recorded anew before the entries there now go (a crash in between leaves both).
  const KernelStateRecord::Entries before = kernel_record_->InUse();
  std::vector<std::pair<uint64_t, InodeRef>> aliases;
  ns_.ForEachAliasLocked([&](uint64_t ino, const InodeRef& inode) REQUIRES(ns_lock) {
    alias_ids_[inode.get()] = ino;
    aliases.emplace_back(ino, inode);
  });
  for (const auto& [ino, inode] : aliases) RecordAliasLocked(ino, inode);
  ns_.ForEachLocked([&](const InodeRef& inode) REQUIRES(ns_lock) {
    if (inode->type == FileType::kDirectory && inode->lookups > 0) RecordNodeLocked(inode);
  });
  handles_.ForEachLocked([&](Handle& h) REQUIRES(ns_lock) { RecordHandleLocked(h); });
  kernel_record_->Remove(before);
}

bool Filesystem::ForgetAliasLocked(uint64_t ino) {
  if (!ns_.ForgetAliasLocked(ino)) return false;
  if (auto it = alias_records_.find(ino); it != alias_records_.end()) {
    Inode* inode = recorded_.at(it->second).get();
    if (auto id = alias_ids_.find(inode); id != alias_ids_.end() && id->second == ino) {
      alias_ids_.erase(id);
    }
    MutexLock ilock(inode->mu);
    if (inode->record == it->second) {
      inode->record = -1;
      inode->content_recorded = false;
    }
    kernel_record_->RemoveNode(it->second);
    recorded_.erase(it->second);
    alias_records_.erase(it);
  } else {
    std::erase_if(alias_ids_, [ino](const auto& alias) { return alias.second == ino; });
  }
  return true;
}

void Filesystem::RecoverKernelState(const KernelStateRecord::State& state, Adopted& adopted) {
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
      inode->content = std::move(*content);
      inode->mode = n.mode;
      inode->uid = n.uid;
      inode->gid = n.gid;
      // Unsealed: its next seal publishes it.
      inode->version = inode->sealed_version + 1;
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
  RecordAllLocked();
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

Result<FileContent> Filesystem::RecordedContent(const KernelStateRecord::Node& n,
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

Status Filesystem::RescueOpenFiles(const KernelStateRecord::State& state, Adopted& adopted) {
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
  kernel_record_->Clear();
  return Status::Ok();
}

}  // namespace ckptfs
