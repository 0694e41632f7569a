#include "core/filesystem/filesystem.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/base/serve_policy.h"
#include "core/filesystem/open_mode.h"
#include "core/filesystem/worker_takeover.h"
#include "core/recovery/cache_memory_layout.h"
#include "core/recovery/rescue.h"

namespace ckptfs {
namespace {

Config WithFlushIo(Config config, FlushIo flush_io) {
  config.flush_io = flush_io;
  return config;
}

// The mode a write or truncation by `c` leaves (the kernel's file_remove_privs): a caller
// without CAP_FSETID clears set-user-ID, and set-group-ID when group execute is set.
uint32_t ModeAfterChangeBy(uint32_t mode, const Caller& c) {
  if (c.uid == 0) return mode;
  mode &= ~static_cast<uint32_t>(S_ISUID);
  if (mode & S_IXGRP) mode &= ~static_cast<uint32_t>(S_ISGID);
  return mode;
}

// Blocks a write of [offset, offset+length) may need, whatever the file holds.
size_t WorstCaseBlocks(uint64_t offset, size_t length) {
  if (length == 0) return 0;
  return (offset + length - 1) / kBlockSize - offset / kBlockSize + 1;
}

}  // namespace

Result<std::unique_ptr<Filesystem>> Filesystem::Make(const Config& config,
                                                     std::unique_ptr<Env> env, Clock& clock) {
  Config resolved = config;
  if (config.shared) {
    Result<std::string> node = NodeNameOrHostName(config.node);
    if (!node.ok()) return node.status();
    resolved.node = *node;
  }
  Result<BackingStore> store = OpenBackingStore(*env, resolved);
  if (!store.ok()) return store.status();
  std::unique_ptr<Filesystem> fs(new Filesystem(resolved, *store, std::move(env), clock));
  // A worker whose death would lose what it holds does not serve with the cache shared.
  if (!fs->unrecoverable_.ok()) return fs->unrecoverable_;
  if (config.shared) {
    Journal& journal = fs->journal_;
    Result<std::unique_ptr<SharedMount>> shared = SharedMount::Join(
        fs->config_, *fs->env_, fs->root_fd_, clock, [&journal] {
          return FlushProgress{journal.last_seq(), journal.durable_seq(), journal.pending_bytes()};
        });
    if (!shared.ok()) {
      return Status::Error(shared.status().err(),
                           "cannot join the mounts sharing the backing directory: " +
                               shared.status().message());
    }
    fs->shared_ = std::move(*shared);
    RemoveStagingLeftovers(*fs->env_, fs->staging_fd_, TakesOverStagedFiles(config));
    SharedMount* mount = fs->shared_.get();
    fs->flusher_->HoldMarkers([mount](const std::string& marker) { return mount->Post(marker); },
                              [mount] { mount->DataDurable(); });
    if (config.recovers_earlier_mount) {
      // Other members may have published a newer marker of the same name since the dead mount
      // sealed its own: no clock tells which is newer, so what is there stays.
      fs->flusher_->DropMarkersOverTakenNames(
          "recovered from a mount whose daemon died before its commit, and the name is taken on "
          "the backing store (by a marker that may be newer); the files beside it are published");
    }
  }
  return fs;
}

Filesystem::Filesystem(const Config& config, const BackingStore& store, std::unique_ptr<Env> env,
                       Clock& clock)
    : config_(WithFlushIo(config, store.flush_io)),
      env_(std::move(env)),
      device_nodes_(store.device_nodes),
      clock_(clock),
      root_fd_(store.root_fd),
      staging_fd_(store.staging_fd),
      start_time_(WallTime()),
      arena_(config.cache_size, config.arena_fd),
      ns_(config_, *env_, clock_, stats_, journal_, root_fd_,
          [this] { flusher_->Notify(); }),
      zarr_(config_, *env_, ns_),
      tensors_(ns_, *env_),
      reclaimer_(ns_, stats_, staging_fd_, config.worker),
      handles_(config.worker, clock_),
      kernel_state_(nullptr, ns_, handles_, stats_) {
  specials_.Add(
      std::make_unique<ControlNodes>(static_cast<ControlFiles::Source&>(*this), start_time_));
  specials_.Add(std::make_unique<TensorViewNodes>(tensors_));
  flusher_ = std::make_unique<Flusher>(config_, *env_, clock_, staging_fd_, journal_, stats_,
                                       static_cast<FlushClient&>(*this));
  arena_.SetReclaimer([this](size_t wanted) { return reclaimer_.Reclaim(wanted); });
  reclaimer_.SetSpillObserver([this](Inode& inode) REQUIRES(inode.mu) {
    kernel_state_.RecordContentLocked(inode);
  });
  arena_.SetPressureCallback([this] { flusher_->Hurry(); });
  if (arena_.shared()) {
    Result<std::unique_ptr<RecoveryLog>> log = RecoveryLog::Map(
        config.arena_fd, ArenaLogOffset(config.cache_size), kArenaLogBytes);
    if (log.ok()) {
      log_ = std::move(*log);
      RecoveryLog* l = log_.get();
      journal_.SetObservers([l](uint64_t seq) { l->Durable(seq); },
                            [l](uint64_t seq) { l->Cancelled(seq); });
      ns_.SetRecoveryLog(l);
      Result<std::unique_ptr<KernelStateRecord>> record = KernelStateRecord::Map(
          config.arena_fd, ArenaKernelStateOffset(config.cache_size), arena_.capacity_blocks());
      if (record.ok()) {
        kernel_state_.SetRecord(std::move(*record));
      } else {
        unrecoverable_ = Status::Error(record.status().err(),
                                       "no kernel state record in the cache's shared memory (" +
                                           record.status().ToString() +
                                           "): a crash would lose the open files");
      }
    } else {
      unrecoverable_ = Status::Error(log.status().err(),
                                     "no recovery log in the cache's shared memory (" +
                                         log.status().ToString() +
                                         "): a crash would lose what is sealed");
    }
  }
  takeover_ = std::make_unique<WorkerTakeover>(
      *this, WorkerTakeover::Parts{config_, *env_, root_fd_, staging_fd_, stats_, arena_,
                                   log_.get(), journal_, ns_, handles_, kernel_state_, specials_,
                                   *flusher_});
}

Filesystem::~Filesystem() {
  arena_.StopBackground();
  if (shared_) shared_->Leave();
  flusher_.reset();
  shared_.reset();
  NamespaceLock lock(ns_.mutex());
  handles_.ClearLocked();  // Files the kernel never released (the mount went away).
  reclaimer_.ClearLocked();
  env_->Close(staging_fd_);
  env_->Close(root_fd_);
}

Result<HandoffImage> Filesystem::Handoff() { return takeover_->Handoff(); }

void Filesystem::Retire() {
  if (shared_) shared_->Leave();
}

Status Filesystem::Restore(const HandoffImage& image) { return takeover_->Restore(image); }

Status Filesystem::Recover(Recovery kind) { return takeover_->Recover(kind); }

void Filesystem::Start() {
  if (config_.prefault) {
    arena_.Prefault([this] { return NoFileOpenFor(policy::kPrefaultQuiet); });
  }
  arena_.WatchSystemMemory();
  flusher_->Start();
  spdlog::debug("flusher started with the {} backend", flusher_->backend_name());
  if (shared_) {
    Flusher* flusher = flusher_.get();
    shared_->Start(
        [flusher](const std::vector<CommitOutcome>& outcomes) {
          flusher->CommitsDecided(outcomes);
        },
        [flusher] { flusher->Hurry(); });
  }
}

// ---------------------------------------------------------------------------------------------
// Open handles.

bool Filesystem::NoFileOpenFor(Clock::duration quiet) const {
  NamespaceLock lock(ns_.mutex());
  return handles_.NoFileOpenForLocked(quiet);
}

void Filesystem::SealHandleLocked(FileHandle& f) {
  InodeRef owner = ns_.ContentOwner(f.inode);
  bool changed;
  {
    MutexLock lock(owner->mu);
    changed = f.wrote_version > owner->sealed_version;
  }
  if (changed) ns_.SealLocked(owner);
}

// ---------------------------------------------------------------------------------------------
// Operations.

Result<Attr> Filesystem::Lookup(uint64_t parent, const std::string& name) {
  if (Status bad = CheckName(name); !bad.ok()) return bad;
  if (SpecialNodes* special = specials_.ForEntry(parent, name)) {
    return special->Lookup(parent, name);
  }
  NamespaceLock lock(ns_.mutex());
  Result<InodeRef> dir = ns_.DirLocked(parent);
  if (!dir.ok()) return dir.status();
  Result<InodeRef> child = ns_.LookupLocked(*dir, name);
  if (!child.ok() && child.status().err() == ENOENT && name == kTensorViewName) {
    // A checkpoint's tensor view, unless a real entry has its name.
    Result<TensorViews::Found> found = tensors_.FindLocked(*dir);
    if (!found.ok()) return child.status();
    if (found->root) return *found->root;
    lock.Unlock();
    return tensors_.Build(std::move(found->checkpoint));
  }
  if (!child.ok()) return child.status();
  if ((*child)->type == FileType::kDirectory) {
    if (Status full = kernel_state_.RoomLocked(child->get(), 0); !full.ok()) return full;
  }
  (*child)->lookups++;
  if ((*child)->type == FileType::kDirectory) kernel_state_.RecordNodeLocked(*child);
  return ns_.AttrOf(**child);
}

void Filesystem::Forget(uint64_t ino, uint64_t count) {
  if (ino == kRootIno || specials_.ForNode(ino)) return;
  NamespaceLock lock(ns_.mutex());
  if (kernel_state_.ForgetAliasLocked(ino)) return;
  InodeRef inode = ns_.FindLocked(ino);
  if (!inode) return;
  inode->lookups -= std::min(inode->lookups, count);
  if (inode->lookups == 0 && inode->type == FileType::kDirectory) {
    kernel_state_.UnrecordNodeLocked(*inode);
  }
  ns_.MaybeDropLocked(inode);
}

Result<Attr> Filesystem::GetAttr(uint64_t ino) {
  if (SpecialNodes* special = specials_.ForNode(ino)) return special->GetAttr(ino);
  NamespaceLock lock(ns_.mutex());
  InodeRef inode = ns_.FindLocked(ino);
  if (!inode) return UnknownInode(ino);
  // A backing name gone meanwhile leaves the attributes as they were: the next lookup says so.
  (void)ns_.RefreshFileLocked(inode);
  return ns_.AttrOf(*inode);
}

Result<Attr> Filesystem::SetAttr(uint64_t ino, const SetAttrRequest& req, uint64_t handle) {
  if (SpecialNodes* special = specials_.ForNode(ino)) {
    return special->Refuse(SpecialNodes::Change::kSetAttr, ino, "");
  }
  Reservation reservation;
  if (req.size) reservation = arena_.Reserve(1);
  if (req.size) WaitPassthroughReleased(ino);
  NamespaceLock lock(ns_.mutex());
  InodeRef inode = ns_.FindLocked(ino);
  if (!inode) return UnknownInode(ino);
  timespec now = WallTime();
  if (req.size) {
    if (inode->type == FileType::kDirectory) return Status::Error(EISDIR, "truncate of a directory");
    if (inode->type != FileType::kRegular) {
      return Status::Error(EINVAL, "truncate of a symlink or special file");
    }
    if (IsZarrView(*inode)) return Status::Error(EPERM, "a view of a zarr array has a fixed size");
    if (inode->passthrough_handles > 0) {
      return Status::Error(ETXTBSY, "truncate while read through FUSE passthrough");
    }
    Status st = ns_.LoadOriginLocked(inode);
    if (!st.ok()) return st;
    MutexLock ilock(inode->mu);
    inode->content.Truncate(*req.size, reservation);
    kernel_state_.RecordContentLocked(*inode);
    inode->version++;
    inode->mtime = inode->ctime = now;
    if (Handle* h = handle != 0 ? handles_.Find(handle) : nullptr; h && h->file()) {
      h->file()->wrote_version = inode->version;
    }
  }
  bool meta = req.mode || req.uid || req.gid || req.atime || req.mtime;
  if (meta) {
    MutexLock ilock(inode->mu);
    if (req.mode) inode->mode = *req.mode & 07777;
    if (req.uid) inode->uid = *req.uid;
    if (req.gid) inode->gid = *req.gid;
    if (req.atime) inode->atime = req.atime->tv_nsec == UTIME_NOW ? now : *req.atime;
    if (req.mtime) inode->mtime = req.mtime->tv_nsec == UTIME_NOW ? now : *req.mtime;
    inode->ctime = now;
  }
  if (req.size && handle == 0) ns_.SealLocked(inode);
  if (meta && inode->ino == kRootIno) {
    spdlog::debug("attributes of the mount root are not written to the backing directory");
  } else if (meta) {
    ns_.JournalAttrsLocked(inode, req.mode.has_value(), req.uid || req.gid, req.atime || req.mtime);
  }
  return ns_.AttrOf(*inode);
}

Result<Attr> Filesystem::MkdirOnce(uint64_t parent, const std::string& name, uint32_t mode,
                                   const Caller& c) {
  NamespaceLock lock(ns_.mutex());
  if (Status full = kernel_state_.RoomLocked(nullptr, 0); !full.ok()) return full;
  Result<EntryRef> e =
      ns_.AddNewLocked(parent, name, FileType::kDirectory, mode, c, JournalEntry::Kind::kMkdir);
  if (!e.ok()) return e.status();
  InodeRef inode = (*e)->inode;
  inode->complete = true;
  (*e)->parent->nlink++;
  ns_.AppendLocked(std::move(*e));
  kernel_state_.RecordNodeLocked(inode);
  return ns_.AttrOf(*inode);
}

Status Filesystem::Unlink(uint64_t parent, const std::string& name, const Caller& c) {
  Status st = Reserving(c, [&](Reservation& reservation, size_t& more) {
    return UnlinkReserved(parent, name, reservation, more);
  });
  if (!c.resent || st.err() != ENOENT) return st;
  NoteAppliedBefore("unlink", name);
  return Status::Ok();
}

Status Filesystem::UnlinkReserved(uint64_t parent, const std::string& name,
                                  Reservation& reservation, size_t& more) {
  if (SpecialNodes* special = specials_.ForEntry(parent, name)) {
    return special->Refuse(SpecialNodes::Change::kUnlink, parent, name);
  }
  NamespaceLock lock(ns_.mutex());
  Result<InodeRef> dir = ns_.DirLocked(parent);
  if (!dir.ok()) return dir.status();
  Result<InodeRef> child = ns_.ChildLocked(*dir, name);
  if (!child.ok()) return child.status();
  InodeRef inode = *child;
  if (inode->type == FileType::kDirectory) return Status::Error(EISDIR, name);
  if (ns_.ContentOwner(inode) != inode) {
    Status removed = zarr_.UnlinkLocked(*dir, name, inode, reservation, more);
    if (removed.ok() && more == 0) kernel_state_.RecordPlaceLocked(inode);
    return removed;
  }
  if (inode->nlink > 1 || inode->open_handles > 0 || inode->lookups > 0) {
    Status st = ns_.LoadOriginLocked(inode);
    if (!st.ok()) return st;
  }
  ns_.RemoveNameLocked(*dir, name, inode);
  inode->nlink--;
  {
    MutexLock ilock(inode->mu);
    inode->ctime = WallTime();
  }
  if (inode->nlink == 0) {
    ns_.CancelUnsentLocked(inode);
    ns_.MaybeDropLocked(inode);
  }
  kernel_state_.RecordPlaceLocked(inode);
  zarr_.ForgetIfGoneLocked(*dir);
  return Status::Ok();
}

Status Filesystem::RmdirOnce(uint64_t parent, const std::string& name) {
  if (SpecialNodes* special = specials_.ForEntry(parent, name)) {
    return special->Refuse(SpecialNodes::Change::kRmdir, parent, name);
  }
  NamespaceLock lock(ns_.mutex());
  Result<InodeRef> dir = ns_.DirLocked(parent);
  if (!dir.ok()) return dir.status();
  Result<InodeRef> child = ns_.ChildLocked(*dir, name);
  if (!child.ok()) return child.status();
  InodeRef inode = *child;
  if (inode->type != FileType::kDirectory) return Status::Error(ENOTDIR, name);
  ns_.LoadDirLocked(inode);
  if (!inode->children.empty()) return Status::Error(ENOTEMPTY, name);
  if (Status st = zarr_.RmdirLocked(inode); !st.ok()) return Status::Error(st.err(), name);
  ns_.RemoveNameLocked(*dir, name, inode);
  inode->nlink = 0;
  (*dir)->nlink--;
  ns_.CancelUnsentLocked(inode);
  ns_.MaybeDropLocked(inode);
  kernel_state_.RecordPlaceLocked(inode);
  return Status::Ok();
}

Result<Attr> Filesystem::SymlinkOnce(uint64_t parent, const std::string& name,
                                     const std::string& target, const Caller& c) {
  if (target.size() >= 4096) return Status::Error(ENAMETOOLONG, "symlink target");
  NamespaceLock lock(ns_.mutex());
  Result<EntryRef> e =
      ns_.AddNewLocked(parent, name, FileType::kSymlink, 0777, c, JournalEntry::Kind::kSymlink);
  if (!e.ok()) return e.status();
  InodeRef inode = (*e)->inode;
  inode->symlink_target = target;
  (*e)->symlink_target = target;
  ns_.AppendLocked(std::move(*e));
  return ns_.AttrOf(*inode);
}

Result<Attr> Filesystem::MknodOnce(uint64_t parent, const std::string& name, uint32_t mode,
                                   uint64_t rdev, const Caller& c) {
  const uint32_t type = mode & S_IFMT;
  if (type == S_IFREG || type == 0) {
    Result<OpenFile> created = Create(parent, name, mode, O_WRONLY | O_EXCL, c);
    if (!created.ok()) return created.status();
    Status released = Release(created->handle);
    if (!released.ok()) return released;
    return created->attr;
  }
  const bool device = type == S_IFCHR || type == S_IFBLK;
  if (!device && type != S_IFIFO && type != S_IFSOCK) return Status::Error(EINVAL, "mknod type");
  if (device && !device_nodes_) {
    return Status::Error(EPERM, name + ": the backing directory takes no device nodes");
  }
  if (SpecialNodes* special = specials_.ForEntry(parent, name)) {
    return special->Refuse(SpecialNodes::Change::kMknod, parent, name);
  }
  NamespaceLock lock(ns_.mutex());
  Result<EntryRef> e =
      ns_.AddNewLocked(parent, name, FileType::kSpecial, mode, c, JournalEntry::Kind::kMknod);
  if (!e.ok()) return e.status();
  InodeRef inode = (*e)->inode;
  inode->special_type = type;
  inode->rdev = device ? rdev : 0;
  (*e)->node_type = type;
  (*e)->rdev = inode->rdev;
  ns_.AppendLocked(std::move(*e));
  return ns_.AttrOf(*inode);
}

Result<std::string> Filesystem::Readlink(uint64_t ino) {
  NamespaceLock lock(ns_.mutex());
  InodeRef inode = ns_.FindLocked(ino);
  if (!inode) return UnknownInode(ino);
  if (inode->type != FileType::kSymlink) return Status::Error(EINVAL, "not a symlink");
  return inode->symlink_target;
}

Status Filesystem::Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
                          const std::string& new_name, unsigned flags, const Caller& c) {
  Status st = Reserving(c, [&](Reservation& reservation, size_t& more) {
    return RenameReserved(parent, name, new_parent, new_name, flags, reservation, more);
  });
  if (!c.resent || st.err() != ENOENT || !HasEntry(new_parent, new_name)) return st;
  NoteAppliedBefore("rename", name);
  return Status::Ok();
}

Result<Attr> Filesystem::Mkdir(uint64_t parent, const std::string& name, uint32_t mode,
                               const Caller& c) {
  return EntryMadeBefore(MkdirOnce(parent, name, mode, c), c, "mkdir", parent, name, S_IFDIR);
}

Status Filesystem::Rmdir(uint64_t parent, const std::string& name, const Caller& c) {
  Status st = RmdirOnce(parent, name);
  if (!c.resent || st.err() != ENOENT) return st;
  NoteAppliedBefore("rmdir", name);
  return Status::Ok();
}

Result<Attr> Filesystem::Symlink(uint64_t parent, const std::string& name,
                                 const std::string& target, const Caller& c) {
  return EntryMadeBefore(SymlinkOnce(parent, name, target, c), c, "symlink", parent, name);
}

Result<Attr> Filesystem::Mknod(uint64_t parent, const std::string& name, uint32_t mode,
                               uint64_t rdev, const Caller& c) {
  return EntryMadeBefore(MknodOnce(parent, name, mode, rdev, c), c, "mknod", parent, name);
}

Result<Attr> Filesystem::Link(uint64_t ino, uint64_t new_parent, const std::string& new_name,
                              const Caller& c) {
  return EntryMadeBefore(LinkOnce(ino, new_parent, new_name), c, "link", new_parent, new_name);
}

Result<Attr> Filesystem::EntryMadeBefore(Result<Attr> made, const Caller& c, const char* op,
                                         uint64_t parent, const std::string& name,
                                         uint32_t type) {
  if (!c.resent || made.status().err() != EEXIST) return made;
  Result<Attr> there = Lookup(parent, name);
  if (there.ok() && type != 0 && (there->mode & S_IFMT) != type) {
    Forget(there->ino, 1);
    return made;
  }
  NoteAppliedBefore(op, name);
  return there;
}

Result<OpenFile> Filesystem::Create(uint64_t parent, const std::string& name, uint32_t mode,
                                    int flags, const Caller& c) {
  if (c.resent) {
    NamespaceLock lock(ns_.mutex());
    if (std::optional<OpenFile> before = OpenedBeforeLocked(c, "create")) {
      ns_.FindLocked(before->attr.ino)->lookups++;  // The kernel takes the answer as a lookup.
      return *before;
    }
  }
  Result<OpenFile> made = CreateOnce(parent, name, mode, flags, c);
  if (!c.resent || !(flags & O_EXCL) || made.status().err() != EEXIST) return made;
  NoteAppliedBefore("create", name);
  return CreateOnce(parent, name, mode, flags & ~O_EXCL, c);
}

std::optional<OpenFile> Filesystem::OpenedBeforeLocked(const Caller& c, const char* op) {
  const Handle* h = handles_.TakeOpenedByLocked(c.request);
  if (!h || !h->file()) return std::nullopt;
  const FileHandle& f = *h->file();
  NoteAppliedBefore(op, ns_.PathLocked(f.inode));
  OpenFile out{ns_.AttrOf(*f.inode)};
  out.handle = h->number;
  out.direct_io = f.direct;
  return out;
}

void Filesystem::NoteAppliedBefore(const char* op, const std::string& name) {
  spdlog::info("a resent {} of {} had been applied by the worker that died: answered as done",
               op, name);
}

bool Filesystem::HasEntry(uint64_t parent, const std::string& name) {
  NamespaceLock lock(ns_.mutex());
  Result<InodeRef> dir = ns_.DirLocked(parent);
  return dir.ok() && ns_.ChildLocked(*dir, name).ok();
}

Status Filesystem::RenameReserved(uint64_t parent, const std::string& name, uint64_t new_parent,
                                  const std::string& new_name, unsigned flags,
                                  Reservation& reservation, size_t& more) {
  if (SpecialNodes* special = specials_.ForEntry(parent, name)) {
    return special->Refuse(SpecialNodes::Change::kRename, parent, name);
  }
  if (SpecialNodes* special = specials_.ForEntry(new_parent, new_name)) {
    return special->Refuse(SpecialNodes::Change::kRename, new_parent, new_name);
  }
  if (flags & ~static_cast<unsigned>(RENAME_NOREPLACE)) {
    return Status::Error(EINVAL, "only RENAME_NOREPLACE is supported");
  }
  Status bad = CheckName(new_name);
  if (!bad.ok()) return bad;
  NamespaceLock lock(ns_.mutex());
  Result<InodeRef> src = ns_.DirLocked(parent);
  if (!src.ok()) return src.status();
  Result<InodeRef> dst = ns_.DirLocked(new_parent);
  if (!dst.ok()) return dst.status();
  Result<InodeRef> child_r = ns_.ChildLocked(*src, name);
  if (!child_r.ok()) return child_r.status();
  InodeRef child = *child_r;
  Result<InodeRef> victim_r = ns_.ChildLocked(*dst, new_name);
  if (!victim_r.ok() && victim_r.status().err() != ENOENT) return victim_r.status();
  InodeRef victim = victim_r.ok() ? *victim_r : nullptr;
  if (victim == child) return Status::Ok();
  if (victim && (flags & RENAME_NOREPLACE)) return Status::Error(EEXIST, new_name);
  bool handled;
  Status viewed = zarr_.RenameLocked(*src, name, child, *dst, new_name, &handled, reservation, more);
  if (viewed.ok() && more == 0 && handled) {
    // A zarr chunk renamed into a fine grid: the names it changed are recorded as well.
    kernel_state_.RecordPlaceLocked(child);
    if (victim) kernel_state_.RecordPlaceLocked(victim);
  }
  if (!viewed.ok() || more > 0 || handled) return viewed;
  if (Status renamed = ns_.RenameLocked(*src, name, child, *dst, new_name, victim);
      !renamed.ok()) {
    return renamed;
  }
  kernel_state_.RecordPlaceLocked(child);
  if (victim) kernel_state_.RecordPlaceLocked(victim);
  zarr_.RenamedLocked(*src, name, child, *dst, new_name, reservation);
  return Status::Ok();
}

Result<Attr> Filesystem::LinkOnce(uint64_t ino, uint64_t new_parent,
                                  const std::string& new_name) {
  if (SpecialNodes* special = specials_.ForNode(ino)) {
    return special->Refuse(SpecialNodes::Change::kLink, ino, "");
  }
  if (SpecialNodes* special = specials_.ForEntry(new_parent, new_name)) {
    return special->Refuse(SpecialNodes::Change::kLinkInto, new_parent, new_name);
  }
  Status bad = CheckName(new_name);
  if (!bad.ok()) return bad;
  NamespaceLock lock(ns_.mutex());
  InodeRef inode = ns_.FindLocked(ino);
  if (!inode) return UnknownInode(ino);
  if (IsZarrView(*inode)) return Status::Error(EPERM, "hard link of a view of a zarr array");
  if (Status linked = ns_.LinkLocked(inode, new_parent, new_name); !linked.ok()) return linked;
  inode->lookups++;
  return ns_.AttrOf(*inode);
}

Result<OpenFile> Filesystem::CreateOnce(uint64_t parent, const std::string& name,
                                        uint32_t mode, int flags, const Caller& c) {
  if (SpecialNodes* special = specials_.ForEntry(parent, name)) {
    return special->Refuse(SpecialNodes::Change::kCreate, parent, name);
  }
  Status bad = CheckName(name);
  if (!bad.ok()) return bad;
  uint64_t existing_ino = 0;
  {
    NamespaceLock lock(ns_.mutex());
    Result<InodeRef> dir = ns_.DirLocked(parent);
    if (!dir.ok()) return dir.status();
    Result<InodeRef> existing = ns_.ChildLocked(*dir, name);
    if (existing.ok()) {
      if (flags & O_EXCL) return Status::Error(EEXIST, name);
      (*existing)->lookups++;
      existing_ino = (*existing)->ino;
    } else if (existing.status().err() != ENOENT) {
      return existing.status();
    } else if (Status refused = zarr_.MayCreateLocked(*dir, name); !refused.ok()) {
      return refused;
    } else if (Status full = kernel_state_.RoomLocked(nullptr, 1); !full.ok()) {
      return full;
    } else {
      InodeRef inode = ns_.NewInodeLocked(FileType::kRegular, mode, c);
      ns_.AddNameLocked(*dir, name, inode);
      inode->lookups++;
      {
        MutexLock ilock(inode->mu);
        inode->version = 1;  // A new file is a change even when nothing is written to it.
      }
      auto h = std::make_unique<Handle>(FileHandle(inode), flags);
      h->file()->wrote_version = 1;
      h->file()->request = c.request;
      return OpenHandleLocked(std::move(h), /*may_bypass=*/true);
    }
  }
  Result<OpenFile> opened = Open(existing_ino, flags, c);
  if (!opened.ok()) Forget(existing_ino, 1);
  return opened;
}

Result<OpenFile> Filesystem::Open(uint64_t ino, int flags, const Caller& c) {
  if (SpecialNodes* special = specials_.ForNode(ino)) {
    Result<SpecialNodes::Opened> opened = special->Open(ino, flags);
    if (!opened.ok()) return opened.status();
    auto h = std::make_unique<Handle>(SpecialHandle{std::move(opened->file)}, flags);
    NamespaceLock lock(ns_.mutex());
    return OpenFile{opened->attr, handles_.AddLocked(std::move(h)), opened->direct_io,
                    opened->keep_cache};
  }
  if (c.resent) {
    NamespaceLock lock(ns_.mutex());
    if (std::optional<OpenFile> before = OpenedBeforeLocked(c, "open")) return *before;
  }
  if ((flags & O_ACCMODE) != O_RDONLY) WaitPassthroughReleased(ino);
  return Reserving(c, [&](Reservation& reservation, size_t& more) {
    return OpenReserved(ino, flags, c, reservation, more);
  });
}

void Filesystem::WaitPassthroughReleased(uint64_t ino) {
  if (!hooks_.open_backing) return;  // Passthrough is off: no handle to wait for.
  NamespaceLock lock(ns_.mutex());
  passthrough_released_.wait_for(lock, policy::kPassthroughReleaseWait, [&]() REQUIRES(ns_lock) {
    InodeRef inode = ns_.FindLocked(ino);
    return !inode || inode->passthrough_handles == 0;
  });
}

Result<OpenFile> Filesystem::OpenReserved(uint64_t ino, int flags, const Caller& c,
                                          Reservation& reservation, size_t& more) {
  NamespaceLock lock(ns_.mutex());
  InodeRef inode = ns_.FindLocked(ino);
  if (!inode) return UnknownInode(ino);
  if (inode->type == FileType::kDirectory) return Status::Error(EISDIR, "open of a directory");
  if (inode->type == FileType::kSymlink) return Status::Error(ELOOP, "open of a symlink");
  if (inode->type != FileType::kRegular) {
    return Status::Error(ENXIO, "open of a special file (the kernel opens those itself)");
  }
  const bool truncate = (flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY;
  if (inode->passthrough_handles > 0 && (flags & O_ACCMODE) != O_RDONLY) {
    spdlog::warn("{}: refused to open for writing (ETXTBSY) while it is read through FUSE "
                 "passthrough; -o passthrough=off lets such writers in", ns_.PathLocked(inode));
    return Status::Error(ETXTBSY, "open for writing while read through FUSE passthrough");
  }
  if (IsZarrView(*inode)) {
    Result<ZarrViews::Opened> opened = zarr_.OpenLocked(inode, flags, reservation, more);
    if (!opened.ok() || more > 0) return opened.status();
    auto h = std::make_unique<Handle>(FileHandle(inode), flags);
    h->file()->wrote_version = opened->wrote_version;
    h->file()->request = c.request;
    if (opened->text) {
      // Its reads bypass the page cache, which may hold the text written before the array was
      // served with a fine grid.
      inode->open_handles++;
      return OpenFile{ns_.AttrOf(*inode), handles_.AddLocked(std::move(h)), true};
    }
    return OpenHandleLocked(std::move(h), /*may_bypass=*/false);
  }
  if (Status full = kernel_state_.RoomLocked(inode.get(), 1); !full.ok()) return full;
  if (truncate && reservation.count() == 0) {
    more = 1;
    return Status::Ok();
  }
  if (truncate) {
    bool mode_changed;
    {
      MutexLock ilock(inode->mu);
      if (inode->content.size() > 0 || inode->origin_dir) {
        inode->content = FileContent();
        inode->version++;
        inode->mtime = inode->ctime = WallTime();
      }
      inode->origin_dir.reset();
      const uint32_t mode = ModeAfterChangeBy(inode->mode, c);
      mode_changed = mode != inode->mode;
      inode->mode = mode;
    }
    if (mode_changed) ns_.JournalAttrsLocked(inode, /*set_mode=*/true, false, false);
  } else {
    Status st = ns_.LoadOriginLocked(inode);
    if (!st.ok()) return st;
  }
  auto h = std::make_unique<Handle>(FileHandle(inode), flags);
  h->file()->request = c.request;
  if (flags & O_TRUNC) {
    MutexLock ilock(inode->mu);
    h->file()->wrote_version = inode->version;
  }
  return OpenHandleLocked(std::move(h), /*may_bypass=*/true);
}

OpenFile Filesystem::OpenHandleLocked(std::unique_ptr<Handle> h, bool may_bypass) {
  FileHandle& f = *h->file();
  Inode* inode = f.inode.get();
  OpenFile out{ns_.AttrOf(*inode)};
  MutexLock ilock(inode->mu);
  const FileContent* c = &inode->content;
  const policy::OpenChoice choice = policy::ChooseOpen({
      .may_bypass = may_bypass,
      .access = h->flags & O_ACCMODE,
      .size = c->size(),
      .whole_on_backing = c->memory_blocks() == 0 && c->base() && !c->base()->spill() &&
                          c->base_len() == c->size(),
      .prefetched = inode->backing_prefetched,
      .passthrough_on = static_cast<bool>(hooks_.open_backing),
      .passthrough_readers = inode->passthrough_handles > 0,
      .open = inode->open_handles > 0,
      .cached_open = inode->cached_handles > 0,
      .direct_reads = hooks_.direct_reads,
  });
  if (choice.prefetch) {
    inode->backing_prefetched = true;
    env_->Advise(c->base()->fd(), 0, c->size());
  }
  if (choice.register_passthrough) inode->backing_id = hooks_.open_backing(c->base()->fd());
  // Only readers get here while passthrough handles are open (OpenReserved).
  f.passthrough = inode->backing_id >= 0;
  if (f.passthrough) {
    inode->passthrough_handles++;
    out.backing_id = inode->backing_id;
  } else {
    f.direct = choice.direct;
    if (!f.direct) {
      inode->cached_handles++;
      out.keep_cache = !inode->page_cache_stale;
      inode->page_cache_stale = false;
    }
    out.direct_io = f.direct;
  }
  inode->open_handles++;
  ilock.Unlock();
  Handle& opened = *h;
  out.handle = handles_.AddLocked(std::move(h));
  kernel_state_.RecordHandleLocked(opened);
  return out;
}

Filesystem::ReadAhead Filesystem::ReadAheadLocked(FileHandle& h, uint64_t offset, size_t size) {
  const FileContent* c = &h.inode->content;
  const bool sequential = offset == h.next_read;
  h.next_read = offset + size;
  if (!sequential || !c->base() || offset + size >= c->base_len()) return {};
  uint64_t from = std::max(h.read_ahead_until, offset + size);
  uint64_t to = std::min(c->base_len(), offset + size + policy::kBackingReadAheadBytes);
  // Asks again once the reader has consumed half of what was asked for (or for the rest).
  if (to <= from || (to - from < policy::kBackingReadAheadBytes / 2 && to < c->base_len())) {
    return {};
  }
  h.read_ahead_until = to;
  return {c->base(), from, to - from};
}

Result<ReadData> Filesystem::Read(uint64_t handle, uint64_t offset, size_t size) {
  Handle* found = handles_.Find(handle);
  if (!found) return UnknownHandle(handle);
  ReadData out;
  if (SpecialFile* special = found->special()) return special->Read(offset, size);
  FileHandle* h = found->file();
  // One lock for a plain file's read: the hot path of loads.
  bool viewed;
  ReadAhead ahead;
  {
    MutexLock lock(h->inode->mu);
    viewed = IsZarrViewLocked(*h->inode);
    if (!viewed) {
      out.segments = h->inode->content.Read(offset, size);
      if (h->direct) ahead = ReadAheadLocked(*h, offset, size);
    }
  }
  if (viewed) {
    Result<ReadData> view_data = ZarrViews::Read(*h->inode, offset, size);
    if (!view_data.ok()) return view_data.status();
    out = std::move(*view_data);
  } else if (ahead.file) {
    env_->Advise(ahead.file->fd(), ahead.offset, ahead.length);
  }
  stats_.bytes_read += out.owned.size();
  for (const ReadSegment& s : out.segments) stats_.bytes_read += s.length;
  return out;
}

Result<size_t> Filesystem::Write(uint64_t handle, uint64_t offset, const char* data,
                                 size_t size, const Caller& c) {
  Handle* found = handles_.Find(handle);
  if (!found) return UnknownHandle(handle);
  if (SpecialFile* special = found->special()) {
    return special->Write(std::string_view(data, size));
  }
  FileHandle* h = found->file();
  // A virtual chunk writes into its range of the real chunk; bytes past the real chunk's end
  // are padding beyond the array's shape and are not stored.
  std::shared_ptr<const ChunkView> view;
  {
    MutexLock lock(h->inode->mu);
    view = h->inode->view;
    if (view) h->inode->mtime = h->inode->ctime = WallTime();
    // Reaches the backing store with the version this write makes, at its seal.
    h->inode->mode = ModeAfterChangeBy(h->inode->mode, c);
  }
  ZarrViews::Target target{offset, size};
  if (view) {
    Result<ZarrViews::Target> in_real = ZarrViews::WriteTarget(*view, offset, size);
    if (!in_real.ok()) return in_real.status();
    target = *in_real;
  }
  const uint64_t target_offset = target.offset;
  const size_t target_size = target.size;
  Inode* inode = view ? view->real.get() : h->inode.get();
  Reservation reservation;
  MutexLock lock(inode->mu);
  while (true) {
    // The kernel places O_APPEND writes at the end itself; write-back of mmap'ed pages through
    // such a descriptor comes at the pages' own offsets.
    size_t needed = inode->content.BlocksNeededForWrite(target_offset, target_size);
    if (reservation.count() >= needed ||
        arena_.TryReserve(needed, &reservation, /*reclaim=*/false)) {
      Status st = inode->content.Write(target_offset, data, target_size, reservation);
      if (!st.ok()) return st;
      if (!view) kernel_state_.RecordWriteLocked(*inode, target_offset, target_size);
      break;
    }
    lock.unlock();
    Result<Reservation> got =
        arena_.Reserve(std::max(needed, WorstCaseBlocks(target_offset, target_size)), c.interrupted);
    if (!got.ok()) return got.status();
    reservation = std::move(*got);
    lock.lock();
  }
  inode->version++;
  inode->mtime = inode->ctime = WallTime();
  h->wrote_version = inode->version;
  h->writers.Wrote(c.lock_owner);
  stats_.bytes_written += size;
  if (h->direct) {
    if (inode->cached_handles == 0) {
      inode->page_cache_stale = true;
    } else {
      lock.unlock();
      if (hooks_.invalidate_page_cache) {
        hooks_.invalidate_page_cache(h->inode->ino, offset, size);
      }
    }
  }
  return size;
}

Status Filesystem::Flush(uint64_t handle, uint64_t lock_owner) {
  Handle* found = handles_.Find(handle);
  if (!found) return UnknownHandle(handle);
  FileHandle* h = found->file();
  if (!h) return Status::Ok();
  NamespaceLock lock(ns_.mutex());
  {
    InodeRef owner = ns_.ContentOwner(h->inode);
    MutexLock ilock(owner->mu);
    if (!h->writers.Closes(lock_owner)) return Status::Ok();  // Sealed at the writer's close.
  }
  SealHandleLocked(*h);
  if ((found->flags & O_ACCMODE) == O_RDONLY) return Status::Ok();  // Readers are not told.
  MutexLock ilock(h->inode->mu);
  if (!h->inode->flush_error.ok() && !h->inode->flush_error_reported) {
    h->inode->flush_error_reported = true;
    return h->inode->flush_error;
  }
  return Status::Ok();
}

Status Filesystem::Release(uint64_t handle) {
  Handle* found = handles_.Find(handle);
  if (!found) return UnknownHandle(handle);
  NamespaceLock lock(ns_.mutex());
  if (FileHandle* h = found->file()) {
    SealHandleLocked(*h);
    if (h->passthrough) {
      if (--h->inode->passthrough_handles == 0) {
        hooks_.close_backing(h->inode->backing_id);
        h->inode->backing_id = -1;
        passthrough_released_.notify_all();
      }
    } else if (!h->direct) {
      MutexLock ilock(h->inode->mu);
      h->inode->cached_handles--;
    }
    kernel_state_.UnrecordHandleLocked(*h);
    handles_.ForgetOpenedByLocked(h->request);
    if (InodeRef real = ns_.ContentOwner(h->inode); real != h->inode) CloseOneLocked(real);
    CloseOneLocked(h->inode);
    ns_.MaybeDropLocked(h->inode);
  }
  handles_.RemoveLocked(found);
  return Status::Ok();
}

void Filesystem::CloseOneLocked(const InodeRef& inode) {
  inode->open_handles--;
  // A file read from the backing store and left unchanged gives its descriptor back; a durable
  // one that reads from a spill file gives back the spill file's disk space (as at its flush).
  MutexLock ilock(inode->mu);
  const std::shared_ptr<BackingFile>& base = inode->content.base();
  if (inode->content.memory_blocks() == 0 || (base && base->spill())) {
    reclaimer_.UnloadLocked(inode);
  }
}

Status Filesystem::Fsync(uint64_t handle) {
  Handle* found = handles_.Find(handle);
  if (!found) return UnknownHandle(handle);
  FileHandle* h = found->file();
  if (!h) return Status::Ok();
  uint64_t seq;
  {
    NamespaceLock lock(ns_.mutex());
    ns_.SealLocked(h->inode);
    seq = journal_.last_seq();
  }
  if (config_.fsync_mode == FsyncMode::kDefer) {
    MutexLock ilock(h->inode->mu);
    return h->inode->flush_error;
  }
  Status st = flusher_->WaitDurable(seq);
  if (!st.ok()) {
    MutexLock ilock(h->inode->mu);
    if (!h->inode->flush_error.ok()) return h->inode->flush_error;
  }
  return st;
}

Status Filesystem::Fallocate(uint64_t handle, int mode, uint64_t offset, uint64_t length) {
  Handle* found = handles_.Find(handle);
  if (!found) return UnknownHandle(handle);
  FileHandle* h = found->file();
  if (!h) return Status::Error(EBADF, "control file");
  if (mode != 0) return Status::Error(EOPNOTSUPP, "only plain fallocate is supported");
  MutexLock lock(h->inode->mu);
  if (h->inode->view) return Status::Error(EOPNOTSUPP, "fallocate of a zarr chunk");
  if (offset + length > h->inode->content.size()) {
    Reservation none;
    h->inode->content.Truncate(offset + length, none);
    kernel_state_.RecordWriteLocked(*h->inode, offset, length);
    h->inode->version++;
    h->wrote_version = h->inode->version;
    h->inode->mtime = h->inode->ctime = WallTime();
  }
  return Status::Ok();
}

Result<uint64_t> Filesystem::OpenDir(uint64_t ino) {
  if (SpecialNodes* special = specials_.ForNode(ino)) {
    Result<std::vector<DirEntry>> entries = special->List(ino);
    if (!entries.ok()) return entries.status();
    return handles_.AddDir(std::move(*entries));
  }
  std::vector<DirEntry> entries;
  NamespaceLock lock(ns_.mutex());
  Result<InodeRef> dir = ns_.DirLocked(ino);
  if (!dir.ok()) return dir.status();
  ns_.LoadDirLocked(*dir);
  uint64_t parent_ino = (*dir)->names.empty() ? kRootIno : (*dir)->names.begin()->parent->ino;
  entries.push_back({".", ino, S_IFDIR});
  entries.push_back({"..", parent_ino, S_IFDIR});
  for (const auto& [name, child] : (*dir)->children) {
    entries.push_back({name, child->ino, child->TypeBits()});
  }
  return handles_.AddDir(std::move(entries));
}

Result<std::vector<DirEntry>> Filesystem::ReadDir(uint64_t dir_handle, uint64_t offset) {
  return handles_.ReadDir(dir_handle, offset);
}

void Filesystem::ReleaseDir(uint64_t dir_handle) { handles_.ReleaseDir(dir_handle); }

Status Filesystem::FsyncDir(uint64_t ino) {
  if (config_.fsync_mode == FsyncMode::kDefer) return Status::Ok();
  return Sync();
}

Result<struct statvfs> Filesystem::StatFs() {
  struct statvfs st {};
  if (Status got = env_->StatFs(root_fd_, &st); !got.ok()) {
    return Status::Error(got.err(), "statfs of backing directory");
  }
  return st;
}

Status Filesystem::Sync() { return WaitDurable(SyncPoint()); }

std::string Filesystem::StatsJson() {
  nlohmann::json j;
  uint64_t pending_bytes, pending_entries;
  std::string last_error;
  nlohmann::json zarr_arrays;
  {
    NamespaceLock lock(ns_.mutex());
    zarr_arrays = zarr_.StatsLocked();
    pending_bytes = journal_.pending_bytes();
    pending_entries = journal_.pending_entries();
    Status flush_error = flusher_->last_error();
    last_error = flush_error.ok() ? "" : flush_error.ToString();
  }
  double busy_s = static_cast<double>(stats_.flush_busy_ns.load()) / 1e9;
  j["backend"] = flusher_->backend_name();
  j["cache_size"] = config_.cache_size;
  j["memory_used"] = arena_.used_blocks() * kBlockSize;
  j["memory_mapped"] = arena_.mapped_blocks() * kBlockSize;
  j["memory_prefaulted"] = arena_.prefaulted_bytes();
  j["prefault_running"] = config_.prefault && !arena_.prefault_done();
  j["memory_given_back"] = arena_.given_back_bytes();
  j["writers_waiting"] = arena_.waiting_writers();
  j["dirty_bytes"] = pending_bytes;
  j["pending_entries"] = pending_entries;
  j["bytes_written"] = stats_.bytes_written.load();
  j["bytes_read"] = stats_.bytes_read.load();
  j["bytes_flushed"] = stats_.bytes_flushed.load();
  j["files_flushed"] = stats_.files_flushed.load();
  j["versions_skipped"] = stats_.versions_skipped.load();
  j["flush_batches"] = stats_.flush_batches.load();
  j["flush_errors"] = stats_.flush_errors.load();
  j["flush_throughput"] = busy_s > 0 ? static_cast<double>(stats_.bytes_flushed.load()) / busy_s : 0.0;
  j["evicted_bytes"] = stats_.evicted_blocks.load() * kBlockSize;
  j["spilled_bytes"] = stats_.spilled_blocks.load() * kBlockSize;
  j["spill_errors"] = stats_.spill_errors.load();
  const Status spill_error = flusher_->spill_error();
  j["spill_error"] = spill_error.ok() ? "" : spill_error.ToString();
  j["cache_shared"] = arena_.shared();
  j["taken_over_in_memory"] = stats_.taken_over_in_memory.load();
  j["taken_over_from_files"] = stats_.taken_over_from_files.load();
  j["recovered_versions"] = stats_.recovered_versions.load();
  j["recovered_bytes"] = stats_.recovered_bytes.load();
  j["recovered_handles"] = stats_.recovered_handles.load();
  j["recovered_open_bytes"] = stats_.recovered_open_bytes.load();
  j["kernel_record_refused"] = stats_.kernel_record_refused.load();
  j["last_error"] = last_error;
  j["zarr_fine_grid"] = zarr_arrays;
  j["tensor_views"] = tensors_.size();
  j["flush_seconds"] = stats_.flush_seconds.ToJson();
  j["save_to_durable_seconds"] = stats_.save_to_durable_seconds.ToJson();
  if (hooks_.request_stats) j["fuse_request_seconds"] = hooks_.request_stats();
  if (shared_) {
    nlohmann::json shared = shared_->StatusJson();
    shared["held_markers"] = flusher_->held_markers();
    shared["commits_published"] = stats_.commits_published.load();
    shared["commits_failed"] = stats_.commits_failed.load();
    Status failure = flusher_->last_commit_failure();
    shared["last_commit_error"] = failure.ok() ? "" : failure.ToString();
    j["shared"] = std::move(shared);
  }
  if (hooks_.worker_info) {
    j["worker"] =
        nlohmann::json::parse(hooks_.worker_info(), nullptr, /*allow_exceptions=*/false);
  }
  return j.dump(2) + "\n";
}

Status Filesystem::Shutdown() {
  {
    NamespaceLock lock(ns_.mutex());
    ns_.ForEachLocked([&](const InodeRef& inode) REQUIRES(ns_lock) { ns_.SealLocked(inode); });
  }
  Status st = flusher_->Drain(config_.unmount_retry);
  if (shared_) shared_->Leave();
  if (st.ok() && config_.shared) {
    // A member's own staging directory goes with it (it stays when something is left in it).
    (void)env_->Unlink(root_fd_, std::string(kReservedName) + "/" + kStagingDirName + "/" + config_.node, true);
  }
  if (st.ok()) return st;
  std::vector<UnflushedFile> files;
  {
    NamespaceLock lock(ns_.mutex());
    for (const EntryRef& e : journal_.Unflushed()) {
      if (e->kind != JournalEntry::Kind::kPublish) continue;
      files.push_back({e->names.empty() ? e->name : ns_.PathLocked(e->inode), e->snapshot});
    }
  }
  Result<std::string> where = SaveToRescueDirectory(*env_, root_fd_, config_.backing_dir, files);
  std::string list;
  for (const UnflushedFile& f : files) list += (list.empty() ? "" : ", ") + f.path;
  if (!where.ok()) {
    return Status::Error(st.err(), "could not write " + list + " (" + st.message() +
                                       ") and could not save them: " + where.status().ToString());
  }
  return Status::Error(st.err(), "could not write " + list + " (" + st.message() +
                                     "); their contents were saved to " + *where);
}

uint64_t Filesystem::SyncPoint() { return journal_.last_seq(); }

Status Filesystem::WaitDurable(uint64_t point) {
  if (Status st = flusher_->WaitCommitted(point); !st.ok()) return NamingUnflushed(st, point);
  // Nothing of what was closed is missing, but writers are stuck: a sync says so too.
  return flusher_->spill_error();
}

Status Filesystem::NamingUnflushed(const Status& error, uint64_t point) {
  constexpr size_t kNamed = 100;
  std::vector<std::string> paths;
  std::unordered_set<std::string> seen;
  {
    NamespaceLock lock(ns_.mutex());
    for (const EntryRef& e : journal_.Unflushed()) {
      if (e->seq > point || e->kind != JournalEntry::Kind::kPublish) continue;
      std::string path = e->names.empty() ? e->name : ns_.PathLocked(e->inode);
      if (seen.insert(path).second) paths.push_back(std::move(path));
    }
  }
  if (paths.empty()) return error;
  std::string list;
  for (size_t i = 0; i < std::min(paths.size(), kNamed); ++i) {
    list += (i == 0 ? "" : ", ") + paths[i];
  }
  if (paths.size() > kNamed) list += ", and " + std::to_string(paths.size() - kNamed) + " more";
  return Status::Error(error.err(), std::to_string(paths.size()) + " files are not durable (" +
                                        list + "); the first failure: " + error.message());
}

Status Filesystem::RequestUpgrade(const std::string& binary) {
  if (!hooks_.upgrade) return Status::Error(EOPNOTSUPP, "this mount runs without a supervisor");
  return hooks_.upgrade(binary);
}

std::string Filesystem::PathOf(const EntryRef& entry) {
  NamespaceLock lock(ns_.mutex());
  return ns_.PathLocked(entry->inode);
}

Status Filesystem::Flushed(const FlushReport& report) {
  NamespaceLock lock(ns_.mutex());
  for (const EntryRef& e : report.applied) e->inode->on_backing = true;
  for (const EntryRef& e : report.durable) {
    // A held marker is not on the backing store under its names yet (core/flush/held_markers.h).
    if (shared_ && journal_.StateOf(e).held) continue;
    e->inode->on_backing = true;
    // Durable: no longer the inode's pending entry, though the journal completes it only after
    // this report (Reclaimer::UnloadLocked would otherwise refuse a clean file in between).
    if (e->inode->last_entry.lock() == e) e->inode->last_entry.reset();
    if (e->kind != JournalEntry::Kind::kPublish) continue;
    bool clean;
    {
      Inode* inode = e->inode.get();
      MutexLock ilock(inode->mu);
      inode->durable_version = std::max(inode->durable_version, e->version);
      inode->flush_error = Status::Ok();
      clean = inode->durable_version == inode->version;
    }
    if (!clean) continue;
    reclaimer_.AddCandidateLocked(e->inode);
    // A spill file is disk space in the staging directory: given back once the file is durable
    // (and closed).
    MutexLock ilock(e->inode->mu);
    const std::shared_ptr<BackingFile>& base = e->inode->content.base();
    if (base && base->spill()) reclaimer_.UnloadLocked(e->inode);
  }
  if (!report.failed) return Status::Ok();
  const EntryRef& failed = report.failed;
  Status st = Status::Error(report.error.err(),
                            ns_.PathLocked(failed->inode) + ": " + report.error.message() +
                                (report.backing_gone ? " (the backing directory, or its .ckptfs, "
                                                       "was removed; unmount saves the data to "
                                                       "a rescue directory)"
                                                     : ""));
  if (failed->kind == JournalEntry::Kind::kPublish) {
    MutexLock ilock(failed->inode->mu);
    failed->inode->flush_error = st;
    failed->inode->flush_error_reported = false;
  }
  return st;
}

}  // namespace ckptfs
