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
    spdlog::warn("the kernel state record is full (or a path is longer than {} bytes): nodes "
                 "and open files beyond it go stale if this worker crashes",
                 KernelStateRecord::kMaxPath);
  });
}

bool Writable(int flags) { return (flags & O_ACCMODE) != O_RDONLY; }

}  // namespace

void Filesystem::RecordNodeLocked(const InodeRef& inode) {
  if (!kernel_record_ || inode->ino == kRootIno) return;
  {
    MutexLock ilock(inode->mu);
    if (inode->record >= 0) return;
  }
  const int entry = kernel_record_->AddNode(inode->ino, inode->type == FileType::kDirectory,
                                            ns_.PathLocked(inode));
  if (entry < 0) return WarnRecordFull();
  recorded_.emplace(entry, inode);
  MutexLock ilock(inode->mu);
  inode->record = entry;
}

void Filesystem::RecordHandleLocked(Handle* h) {
  if (!kernel_record_ || !h->inode || IsZarrView(*h->inode)) return;
  RecordNodeLocked(h->inode);
  if (Writable(h->flags)) {
    MutexLock ilock(h->inode->mu);
    if (h->inode->record >= 0) {
      h->inode->content_recorded = true;
      RecordContentLocked(*h->inode);
    }
  }
  h->record = kernel_record_->AddHandle(h->number, h->inode->ino, h->flags, h->request);
  if (h->record < 0) WarnRecordFull();
}

void Filesystem::UnrecordHandleLocked(Handle* h) {
  if (!kernel_record_ || !h->inode) return;
  if (h->record >= 0) kernel_record_->RemoveHandle(h->record);
  h->record = -1;
  // Its last handle: a closed file's node id needs no record (the kernel looks it up again).
  if (h->inode->open_handles == 1) UnrecordNodeLocked(*h->inode);
}

void Filesystem::UnrecordNodeLocked(Inode& inode) {
  if (!kernel_record_) return;
  MutexLock ilock(inode.mu);
  if (inode.record < 0) return;
  kernel_record_->RemoveNode(inode.record);
  recorded_.erase(inode.record);
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
    kernel_record_->Tag(block.slot(), inode.ino, index, stamp);
  }
}

void Filesystem::RecordWriteLocked(Inode& inode, uint64_t offset, uint64_t length) {
  if (inode.record < 0 || !inode.content_recorded || length == 0) return;
  const uint64_t stamp = kernel_record_->NextStamp();
  for (uint64_t i = offset / kBlockSize; i <= (offset + length - 1) / kBlockSize; ++i) {
    if (const BlockRef* block = inode.content.blocks().Find(i)) {
      kernel_record_->Tag(block->slot(), inode.ino, i, stamp);
    }
  }
  kernel_record_->SetSize(inode.record, inode.content.size());
}

void Filesystem::RecordPathsLocked(const InodeRef& changed) {
  if (recorded_.empty()) return;
  if (changed->type != FileType::kDirectory && alias_records_.empty()) {
    MutexLock ilock(changed->mu);
    if (changed->record < 0) return;  // No recorded path goes through it.
  }
  for (auto it = recorded_.begin(); it != recorded_.end();) {
    const auto& [entry, inode] = *it;
    if (inode->names.empty() && inode->type == FileType::kDirectory) {
      // Removed: the kernel's node of it is stale anyway.
      kernel_record_->RemoveNode(entry);
      MutexLock ilock(inode->mu);
      if (inode->record == entry) inode->record = -1;
      it = recorded_.erase(it);
      continue;
    }
    // A file removed while open has no path: it is not recovered.
    kernel_record_->SetPath(entry, inode->names.empty() ? "" : ns_.PathLocked(inode));
    ++it;
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
  // Recorded anew before the entries there now go (a crash in between leaves both).
  const KernelStateRecord::Entries before = kernel_record_->InUse();
  ns_.ForEachLocked([&](const InodeRef& inode) REQUIRES(ns_lock) {
    if (inode->type == FileType::kDirectory && inode->lookups > 0) RecordNodeLocked(inode);
  });
  ns_.ForEachAliasLocked([&](uint64_t ino, const InodeRef& inode) REQUIRES(ns_lock) {
    const int entry = kernel_record_->AddNode(ino, inode->type == FileType::kDirectory,
                                              ns_.PathLocked(inode));
    if (entry < 0) return WarnRecordFull();
    recorded_.emplace(entry, inode);
    alias_records_[ino] = entry;
  });
  for (auto& [address, h] : handles_) RecordHandleLocked(h.get());
  kernel_record_->Remove(before);
}

bool Filesystem::ForgetAliasLocked(uint64_t ino) {
  if (!ns_.ForgetAliasLocked(ino)) return false;
  if (auto it = alias_records_.find(ino); it != alias_records_.end()) {
    kernel_record_->RemoveNode(it->second);
    recorded_.erase(it->second);
    alias_records_.erase(it);
  }
  return true;
}

void Filesystem::RecoverKernelState(const KernelStateRecord::State& state, Adopted& adopted) {
  NamespaceLock lock(ns_.mutex());
  std::unordered_map<uint64_t, InodeRef> nodes;  // The crashed worker's node -> the inode now.
  size_t files = 0, lost = 0;
  uint64_t bytes = 0;
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
    if (n.path.empty() && !n.content) continue;  // Removed, open for reading: its handles fail.
    Result<InodeRef> found =
        n.path.empty() ? Status::Error(ENOENT, "removed") : ResolveLocked(n.path);
    if (n.directory) {
      if (found.ok() && (*found)->type == FileType::kDirectory) nodes[n.ino] = *found;
      continue;
    }
    Result<FileContent> content = n.content ? RecordedContent(n, adopted) : FileContent();
    if (!content.ok()) {
      spdlog::error("recovery: {}: {}; its handles fail", n.path, content.status().ToString());
      ++lost;
      continue;
    }
    InodeRef inode = found.ok() && (*found)->type == FileType::kRegular ? *found : nullptr;
    if (n.path.empty()) {
      // Removed while open for writing: nameless as long as its handles are open, as it was.
      inode = ns_.NewInodeLocked(FileType::kRegular, n.mode, Caller{n.uid, n.gid, 0});
      inode->nlink = 0;
    } else if (!found.ok() && found.status().err() == ENOENT && n.content) {
      // Made through the mount and never sealed.
      if (Result<PathParent> at = ParentOfLocked(n.path); at.ok()) {
        inode = ns_.NewInodeLocked(FileType::kRegular, n.mode, Caller{n.uid, n.gid, 0});
        ns_.AddNameLocked(ns_.FindLocked(at->dir), at->name, inode);
      }
    }
    if (!inode) {
      spdlog::error("recovery: the open file {} cannot be found again: {}", n.path,
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
      spdlog::error("recovery: {}: {}", n.path, loaded.ToString());
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
        restored_handles_.count(r.fh) > 0) {
      ++lost_handles;
      continue;
    }
    const InodeRef& inode = node->second;
    auto h = std::make_unique<Handle>(inode, r.flags);
    h->number = r.fh;
    h->request = r.request;
    if (r.request != 0) opened_by_request_[r.request] = r.fh;
    {
      MutexLock ilock(inode->mu);
      if (Writable(r.flags)) h->wrote_version = inode->version;
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
    if (!n.content || n.path.empty()) continue;  // Removed while open: nobody can reach it.
    Result<FileContent> content = RecordedContent(n, adopted);
    if (!content.ok()) {
      spdlog::error("recovery: {}, open for writing, cannot be rescued: {}", n.path,
                    content.status().ToString());
      continue;
    }
    files.push_back({n.path, std::move(*content)});
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
