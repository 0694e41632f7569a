#include "core/filesystem/kernel_state_keeper.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <mutex>
#include <vector>

#include "core/views/zarr_views.h"

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

}  // namespace

KernelStateKeeper::KernelStateKeeper(std::unique_ptr<KernelStateRecord> record, Namespace& ns,
                                     HandleTable& handles, Stats& stats)
    : record_(std::move(record)), ns_(ns), handles_(handles), stats_(stats) {}

Status KernelStateKeeper::RoomLocked(const Inode* node, size_t handles) {
  if (!record_) return Status::Ok();
  size_t nodes = 1;
  if (node) {
    MutexLock ilock(node->mu);
    if (node->record >= 0) nodes = 0;
  }
  if (record_->HasRoom(nodes, handles)) return Status::Ok();
  stats_.kernel_record_refused++;
  WarnRecordRefuses();
  return Status::Error(ENFILE, "the kernel state record is full");
}

void KernelStateKeeper::RecordNodeLocked(const InodeRef& inode) {
  if (!record_) return;
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

void KernelStateKeeper::RecordOneLocked(const InodeRef& inode) {
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

int KernelStateKeeper::AddRecordLocked(uint64_t ino, const InodeRef& inode) {
  uint64_t parent = 0;
  std::string name;
  if (!inode->names.empty()) {
    parent = RecordedDirLocked(inode->names.begin()->parent);
    name = inode->names.begin()->name;
  }
  const int entry =
      record_->AddNode(ino, inode->type == FileType::kDirectory, parent, name);
  if (entry < 0) {
    WarnRecordFull();
    return -1;
  }
  recorded_.emplace(entry, inode);
  return entry;
}

uint64_t KernelStateKeeper::RecordedDirLocked(const InodeRef& dir) {
  if (dir->ino == kRootIno) return kRootIno;
  RecordNodeLocked(dir);
  MutexLock ilock(dir->mu);
  return dir->record >= 0 ? dir->record_ino : dir->ino;
}

void KernelStateKeeper::RecordAliasLocked(uint64_t ino, const InodeRef& inode) {
  if (alias_records_.count(ino) > 0) return;
  const int entry = AddRecordLocked(ino, inode);
  if (entry >= 0) alias_records_[ino] = entry;
}

void KernelStateKeeper::RecordHandleLocked(Handle& handle) {
  FileHandle* h = handle.file();
  if (!record_ || !h || IsZarrView(*h->inode)) return;
  RecordNodeLocked(h->inode);
  if ((handle.flags & O_ACCMODE) != O_RDONLY) {
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
  h->record = record_->AddHandle(handle.number, ino, handle.flags, h->request);
  if (h->record < 0) WarnRecordFull();
}

void KernelStateKeeper::UnrecordHandleLocked(FileHandle& h) {
  if (!record_) return;
  if (h.record >= 0) record_->RemoveHandle(h.record);
  h.record = -1;
  // Its last handle: a closed file's node id needs no record (the kernel looks it up again).
  if (h.inode->open_handles == 1) UnrecordNodeLocked(*h.inode);
}

void KernelStateKeeper::UnrecordNodeLocked(Inode& inode) {
  if (!record_) return;
  // Its own node id, recorded beside an earlier worker's (an earlier worker's ids are never
  // this worker's).
  if (auto own = alias_records_.find(inode.ino); own != alias_records_.end()) {
    record_->RemoveNode(own->second);
    recorded_.erase(own->second);
    alias_records_.erase(own);
  }
  MutexLock ilock(inode.mu);
  if (inode.record < 0) return;
  if (auto alias = alias_records_.find(inode.record_ino);
      alias != alias_records_.end() && alias->second == inode.record) {
    // An earlier worker's node id of it: kept until the kernel forgets that.
    record_->EndContent(inode.record);
  } else {
    record_->RemoveNode(inode.record);
    recorded_.erase(inode.record);
  }
  inode.record = -1;
  inode.content_recorded = false;
}

void KernelStateKeeper::RecordContentLocked(Inode& inode) {
  if (inode.record < 0 || !inode.content_recorded) return;
  KernelStateRecord::Base base;
  if (const std::shared_ptr<BackingFile>& file = inode.content.base()) {
    base.other_file = file->name().empty();
    base.spill = file->name();
    base.length = inode.content.base_len();
  }
  const uint64_t stamp = record_->BeginContent(inode.record, inode.content.size(), base,
                                                      inode.mode, inode.uid, inode.gid);
  for (const auto& [index, block] : inode.content.blocks()) {
    record_->Tag(block.slot(), inode.record_ino, index, stamp);
  }
}

void KernelStateKeeper::RecordWriteLocked(Inode& inode, uint64_t offset, uint64_t length) {
  if (inode.record < 0 || !inode.content_recorded || length == 0) return;
  const uint64_t stamp = record_->NextStamp();
  for (uint64_t i = offset / kBlockSize; i <= (offset + length - 1) / kBlockSize; ++i) {
    if (const BlockRef* block = inode.content.blocks().Find(i)) {
      record_->Tag(block->slot(), inode.record_ino, i, stamp);
    }
  }
  record_->SetSize(inode.record, inode.content.size());
}

void KernelStateKeeper::RecordPlaceLocked(const InodeRef& changed) {
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
      record_->SetName(entry, 0, "");
    } else {
      const Inode::Name& name = *changed->names.begin();
      record_->SetName(entry, RecordedDirLocked(name.parent), name.name);
    }
  }
}

void KernelStateKeeper::RecordAllLocked() {
  if (!record_) return;
  for (auto& [entry, inode] : recorded_) {
    MutexLock ilock(inode->mu);
    inode->record = -1;
    inode->content_recorded = false;
  }
  recorded_.clear();
  alias_records_.clear();
  alias_ids_.clear();
  // Recorded anew before the entries there now go (a crash in between leaves both).
  const KernelStateRecord::Entries before = record_->InUse();
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
  record_->Remove(before);
}

bool KernelStateKeeper::ForgetAliasLocked(uint64_t ino) {
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
    record_->RemoveNode(it->second);
    recorded_.erase(it->second);
    alias_records_.erase(it);
  } else {
    std::erase_if(alias_ids_, [ino](const auto& alias) { return alias.second == ino; });
  }
  return true;
}

}  // namespace ckptfs
