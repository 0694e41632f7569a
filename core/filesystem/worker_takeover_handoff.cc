// WorkerTakeover::Handoff and WorkerTakeover::Restore: one worker of a mount hands its inodes and
// handles to the next (core/recovery/handoff.h).
#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <unordered_map>
#include <unordered_set>

#include "core/backing/backing_store.h"
#include "core/base/nanos.h"
#include "core/filesystem/filesystem.h"
#include "core/filesystem/worker_takeover.h"
#include "core/recovery/handoff.h"

namespace ckptfs {
namespace {

// How many names lie between `inode` and the root.
size_t Depth(const Inode& inode) REQUIRES(ns_lock) {
  size_t depth = 0;
  for (const Inode* i = &inode; !i->names.empty(); i = i->names.begin()->parent.get()) ++depth;
  return depth;
}

}  // namespace

Result<HandoffImage> WorkerTakeover::Handoff() {
  {
    NamespaceLock lock(ns_.mutex());
    InodeRef open_view;
    handles_.ForEachLocked([&](const Handle& h) {
      if (h.file() && IsZarrView(*h.file()->inode)) open_view = h.file()->inode;
    });
    if (open_view) {
      return Status::Error(EAGAIN, ns_.PathLocked(open_view) + ", a view of a zarr array, is open");
    }
    ns_.ForEachLocked([&](const InodeRef& inode) REQUIRES(ns_lock) {
      if (inode->open_handles == 0) ns_.SealLocked(inode);
    });
  }
  flusher_->Hurry();
  const uint64_t point = journal_.last_seq();
  if (Status durable = flusher_->WaitDurable(point); !durable.ok()) return durable;
  // Markers held for their commits: decided either way afterwards (a failed commit's marker is
  // never published, which is what its outcome says, not a reason to keep this worker).
  (void)flusher_->WaitCommitted(point);

  NamespaceLock lock(ns_.mutex());
  // The inodes the kernel knows, with their ancestors, parents first.
  std::unordered_set<Inode*> seen;
  std::vector<InodeRef> known;
  ns_.ForEachLocked([&](const InodeRef& inode) REQUIRES(ns_lock) {
    if (inode->lookups == 0 && inode->open_handles == 0) return;
    for (InodeRef i = inode; i->ino != kRootIno && seen.insert(i.get()).second;
         i = i->names.begin()->parent) {
      // A removed directory, symlink or special file cannot be found again: the kernel's
      // node of it goes stale. A removed regular file's content goes along.
      if (i->names.empty() && i->type != FileType::kRegular) break;
      known.push_back(i);
      if (i->names.empty()) break;
    }
  });
  std::vector<std::pair<size_t, InodeRef>> by_depth;
  for (InodeRef& i : known) by_depth.emplace_back(Depth(*i), std::move(i));
  std::stable_sort(by_depth.begin(), by_depth.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });

  HandoffImage image;
  for (const auto& [depth, inode] : by_depth) {
    HandoffImage::InodeRecord r;
    r.ino = inode->ino;
    r.lookups = inode->lookups;
    if (!inode->names.empty()) {
      r.parent = inode->names.begin()->parent->ino;
      r.name = inode->names.begin()->name;
    }
    if (inode->type == FileType::kRegular) {
      MutexLock ilock(inode->mu);
      r.has_content = inode->names.empty() ||
                      (inode->open_handles > 0 && inode->version != inode->durable_version);
      if (r.has_content) {
        // Blocks of a shared arena stay where they are; anything else is written out.
        r.in_memory = arena_.shared() && !inode->content.base();
        if (r.in_memory) {
          for (const auto& [index, block] : inode->content.blocks()) {
            r.blocks.emplace_back(index, block.slot());
          }
        } else {
          Result<int> fd = env_->Open(staging_fd_, HandoffFileName(r.ino),
                                      O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
          if (!fd.ok()) return fd.status();
          Status written = WriteContentTo(*env_, *fd, inode->content);
          env_->Close(*fd);
          if (!written.ok()) return written;
        }
        r.size = inode->content.size();
        r.mode = inode->mode;
        r.uid = inode->uid;
        r.gid = inode->gid;
        r.mtime_ns = NanosOf(inode->mtime);
        r.ctime_ns = NanosOf(inode->ctime);
      }
    }
    image.inodes.push_back(std::move(r));
  }
  handles_.ForEachLocked([&](const Handle& h) REQUIRES(ns_lock) {
    const std::optional<uint64_t> special =
        h.special() ? h.special()->HandedOverIno() : std::nullopt;
    if (h.special() && !special) return;
    HandoffImage::HandleRecord r;
    r.fh = h.number;
    r.flags = h.flags;
    if (const FileHandle* f = h.file()) {
      MutexLock ilock(f->inode->mu);
      r.ino = f->inode->ino;
      r.direct = f->direct;
      r.passthrough = f->passthrough;
      r.backing_id = f->passthrough ? f->inode->backing_id : -1;
      r.wrote = f->wrote_version > f->inode->durable_version;
    } else {
      r.ino = *special;
    }
    image.handles.push_back(r);
  });
  for (auto& [fh, entries] : handles_.Dirs()) image.dir_handles.push_back({fh, std::move(entries)});
  return image;
}

void WorkerTakeover::AdoptEarlierHandleLocked(std::unique_ptr<Handle> h, uint64_t number) {
  if (FileHandle* f = h->file()) f->inode->open_handles++;
  handles_.AddEarlierLocked(std::move(h), number);
}

Status WorkerTakeover::Restore(const HandoffImage& image) {
  if (log_) log_->Reset();  // Everything sealed was durable before the handoff.
  // Opened before the namespace lock is taken: the stats file is generated at its open.
  std::unordered_map<uint64_t, std::unique_ptr<SpecialFile>> special_files;
  for (const HandoffImage::HandleRecord& r : image.handles) {
    SpecialNodes* special = specials_.ForNode(r.ino);
    if (!special) continue;
    Result<SpecialNodes::Opened> opened = special->Open(r.ino, r.flags);
    if (opened.ok()) special_files.emplace(r.fh, std::move(opened->file));
  }
  // Every block named, adopted at once (contents may share blocks).
  std::unordered_map<uint64_t, BlockRef> adopted;
  Status adopt_error;
  {
    std::vector<uint64_t> slots;
    for (const HandoffImage::InodeRecord& r : image.inodes) {
      for (const auto& [index, slot] : r.blocks) {
        if (adopted.emplace(slot, BlockRef()).second) slots.push_back(slot);
      }
    }
    if (!slots.empty()) {
      Result<std::vector<BlockRef>> blocks = arena_.Adopt(slots);
      if (blocks.ok()) {
        for (size_t i = 0; i < slots.size(); ++i) adopted[slots[i]] = std::move((*blocks)[i]);
      } else {
        adopt_error = blocks.status();
        spdlog::error("handoff: the cache's blocks cannot be taken over: {}",
                      adopt_error.ToString());
      }
    }
  }
  NamespaceLock lock(ns_.mutex());
  std::unordered_set<std::string> taken_spills;
  size_t lost = 0;
  size_t in_memory = 0;
  for (const HandoffImage::InodeRecord& r : image.inodes) {
    InodeRef inode;
    InodeRef dir = r.name.empty() ? nullptr : ns_.FindLocked(r.parent);
    if (r.name.empty()) {
      inode = ns_.MakeInodeLocked(FileType::kRegular, r.ino);
      inode->nlink = 0;
    } else if (dir && dir->type == FileType::kDirectory) {
      auto child = dir->children.find(r.name);
      if (child != dir->children.end()) {
        inode = child->second;
      } else {
        Result<InodeRef> found = Status::Error(ENOENT, r.name);
        if (dir->BackingDir()) found = ns_.BackingInodeLocked(dir, r.name, r.ino);
        if (found.ok()) {
          inode = *found;
          ns_.AddFoundLocked(dir, r.name, inode);
        } else if (r.has_content) {
          // Made through the mount and never sealed: only its handoff file holds it.
          inode = ns_.MakeInodeLocked(FileType::kRegular, r.ino);
          ns_.AddNameLocked(dir, r.name, inode);
        }
      }
    }
    if (!inode || inode->ino != r.ino) {
      spdlog::warn("handoff: the file inode {} was ({}) is not there any more; its node goes "
                   "stale", r.ino, r.name);
      lost += r.has_content;
      continue;
    }
    inode->lookups = r.lookups;
    if (!r.has_content) continue;
    FileContent content;
    if (r.in_memory) {
      if (!adopt_error.ok()) {
        ++lost;
        continue;
      }
      std::vector<std::pair<uint64_t, BlockRef>> blocks;
      for (const auto& [index, slot] : r.blocks) blocks.emplace_back(index, adopted[slot]);
      content = FileContent(r.size, std::move(blocks));
      ++in_memory;
      stats_.taken_over_in_memory += r.size;
    } else {
      // The handoff file becomes a spill file of this worker: named, so that the recovery log
      // and the kernel state record can name it should this worker die, and writable, so that
      // the file's later bytes can be spilled to it when memory runs short.
      const std::string file = HandoffFileName(r.ino);
      const std::string spill = TakenOverSpillName(config_.worker, r.ino);
      Status renamed = env_->Rename(staging_fd_, file, staging_fd_, spill);
      Result<int> fd = renamed.ok() ? env_->Open(staging_fd_, spill, O_RDWR | O_NOFOLLOW)
                                    : Result<int>(renamed);
      if (!fd.ok()) {
        spdlog::error("handoff: cannot take {} in: {}", file, fd.status().ToString());
        ++lost;
        continue;
      }
      taken_spills.insert(spill);
      content = FileContent(std::make_shared<BackingFile>(*env_, *fd, staging_fd_, spill), r.size);
      stats_.taken_over_from_files += r.size;
    }
    inode->origin_dir.reset();
    inode->origin_name.clear();
    MutexLock ilock(inode->mu);
    inode->content = std::move(content);
    inode->mode = r.mode;
    inode->uid = r.uid;
    inode->gid = r.gid;
    inode->mtime = TimespecOf(r.mtime_ns);
    inode->ctime = TimespecOf(r.ctime_ns);
    // Unsealed: its next seal publishes it.
    inode->version = inode->sealed_version + 1;
  }
  for (const HandoffImage::HandleRecord& r : image.handles) {
    std::unique_ptr<Handle> h;
    if (specials_.ForNode(r.ino)) {
      auto opened = special_files.find(r.fh);
      if (opened == special_files.end()) continue;
      h = std::make_unique<Handle>(SpecialHandle{std::move(opened->second)}, r.flags);
    } else {
      InodeRef inode = ns_.FindLocked(r.ino);
      if (!inode || inode->type != FileType::kRegular) continue;
      if (Status loaded = ns_.LoadOriginLocked(inode); !loaded.ok()) {
        spdlog::warn("handoff: {}: {}", ns_.PathLocked(inode), loaded.ToString());
        continue;
      }
      h = std::make_unique<Handle>(FileHandle(inode), r.flags);
      FileHandle& f = *h->file();
      f.direct = r.direct;
      f.passthrough = r.passthrough && r.backing_id >= 0;
      MutexLock ilock(inode->mu);
      if (r.wrote) f.wrote_version = inode->version;
      if (f.passthrough) {
        inode->backing_id = r.backing_id;
        inode->passthrough_handles++;
      } else if (!f.direct) {
        inode->cached_handles++;
      }
    }
    AdoptEarlierHandleLocked(std::move(h), r.fh);
  }
  for (const HandoffImage::DirHandleRecord& r : image.dir_handles) {
    handles_.AddEarlierDir(r.fh, r.entries);
  }
  kernel_state_.RecordAllLocked();
  // The previous worker's spill files are not needed (what lay in them went to handoff files).
  RemoveSpillFiles(*env_, staging_fd_,
                   [&](const std::string& name) { return taken_spills.count(name) > 0; });
  spdlog::info("took over {} inodes, {} open files ({} with unsealed changes, {} of them in the "
               "cache's shared memory), {} open directories",
               image.inodes.size(), image.handles.size(), taken_spills.size() + in_memory,
               in_memory, image.dir_handles.size());
  if (lost > 0) {
    return Status::Error(EIO, std::to_string(lost) + " files with unsealed changes could not be "
                                  "taken over; handoff files stay in the staging directory");
  }
  return Status::Ok();
}

}  // namespace ckptfs
