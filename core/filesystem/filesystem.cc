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

#include "core/base/nanos.h"
#include "core/base/serve_policy.h"
#include "core/filesystem/stats_report.h"
#include "core/filesystem/worker_takeover.h"
#include "core/recovery/cache_memory_layout.h"
#include "core/remote/remote_settings.h"
#include "core/replication/replication_policy.h"

namespace ckptfs {
namespace {

Config WithFlushIo(Config config, FlushIo flush_io) {
  config.flush_io = flush_io;
  return config;
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
  if (Status mapped = fs->UseRecoveryMemory(); !mapped.ok()) return mapped;
  // The store's settings, read once (credentials, region) for every part that uses it.
  std::optional<S3Settings> s3;
  if (!config.remote.empty()) {
    Result<S3Settings> settings = RemoteSettingsOf(resolved, ProcessEnvironment());
    if (!settings.ok()) return settings.status();
    s3 = std::move(*settings);
  }
  if (config.shared) {
    if (Status joined = fs->durability_.JoinSharedMount(s3 ? &*s3 : nullptr); !joined.ok()) {
      return joined;
    }
    const replication::Replicator* replicator = fs->durability_.replicator();
    if (fs->log_ && replicator) {
      // The seqs the log keeps are this run's at the partners (a recovery of them asks what
      // the partners made durable for it).
      fs->log_->SetRun(policy::RunNumber(replicator->run()).value_or(0));
    }
  }
  if (!config.remote.empty()) {
    Filesystem* self = fs.get();
    if (config.local_size > 0) {
      Result<S3Location> location = S3Location::Parse(config.remote);
      if (!location.ok()) return location.status();
      fs->local_tier_ = std::make_unique<LocalTier>(
          LocalTier::Settings{config.local_size, *location, store->root_fd}, fs->stats_,
          [self](const std::string& path, const std::function<bool()>& evict) {
            return self->MayEvict(path, evict);
          },
          [self] {
            const Uploader* uploader = self->durability_.uploader();
            return uploader ? uploader->Progress().pending_bytes : 0;
          });
    }
    auto on_uploaded = [self](const std::string& path, uint64_t ino, uint64_t size,
                              int64_t mtime_ns, const std::string& etag) {
      if (self->local_tier_) self->local_tier_->OnStore(path, ino, size, mtime_ns, etag);
    };
    if (Status connected = fs->durability_.ConnectRemote(*s3, on_uploaded); !connected.ok()) {
      return connected;
    }
    RemoteReaderSettings reading;
    reading.s3 = *s3;
    reading.concurrency = resolved.remote_concurrency;
    reading.markers = resolved.commit_markers;
    reading.staging_fd = store->staging_fd;
    reading.reserved_name = kReservedName;
    reading.manifest_name = kChecksumManifestName;
    Result<std::unique_ptr<RemoteReader>> reader = RemoteReader::Make(reading, fs->stats_);
    if (!reader.ok()) return reader.status();
    fs->remote_reader_ = std::move(*reader);
  }
  return fs;
}

Filesystem::Filesystem(const Config& config, const BackingStore& store, std::unique_ptr<Env> env,
                       Clock& clock)
    : config_(WithFlushIo(config, store.flush_io)),
      env_(std::move(env)),
      store_(store),
      arena_(config.cache_size, config.arena_fd),
      ns_(config_, *env_, clock, stats_, journal_, store_.root_fd,
          [this] { durability_.flusher().Notify(); }),
      zarr_(config_, *env_, ns_),
      tensors_(ns_, *env_),
      handles_(config.worker, clock),
      kernel_state_(nullptr, ns_, handles_, stats_),
      durability_({config_, *env_, store_, clock, stats_, arena_, journal_, ns_}),
      files_({*env_, stats_, arena_, ns_, zarr_, handles_, kernel_state_, durability_.reclaimer(),
              VerifiesReads(config_.verify)}) {
  specials_.Add(
      std::make_unique<ControlNodes>(static_cast<ControlFiles::Source&>(*this), WallTime()));
  TensorViewNodes::SourceCheck check_sources;
  if (VerifiesReads(config_.verify)) {
    check_sources = [this](Inode& inode, const std::shared_ptr<BackingFile>& file) {
      return files_.CheckSource(inode, file);
    };
  }
  specials_.Add(std::make_unique<TensorViewNodes>(tensors_, std::move(check_sources)));
  Reclaimer& reclaimer = durability_.reclaimer();
  arena_.SetReclaimer([&reclaimer](size_t wanted) { return reclaimer.Reclaim(wanted); });
  reclaimer.SetSpillObserver([this](Inode& inode) REQUIRES(inode.mu) {
    kernel_state_.RecordContentLocked(inode);
  });
  arena_.SetPressureCallback([this] { durability_.flusher().Hurry(); });
}

Status Filesystem::UseRecoveryMemory() {
  if (!arena_.shared()) return Status::Ok();
  Result<RecoveryMemory> memory = MapRecoveryMemory(config_.arena_fd, config_.cache_size);
  if (!memory.ok()) return memory.status();
  log_ = std::move(memory->log);
  RecoveryLog* l = log_.get();
  journal_.SetObservers([l](uint64_t seq) { l->Durable(seq); },
                        [l](uint64_t seq) { l->Cancelled(seq); });
  ns_.SetRecoveryLog(l);
  kernel_state_.SetRecord(std::move(memory->record));
  return Status::Ok();
}

WorkerTakeover Filesystem::Takeover() {
  const replication::Replicator* replicator = durability_.replicator();
  return WorkerTakeover(
      *this, WorkerTakeover::Parts{config_, *env_, store_.root_fd, store_.staging_fd, stats_,
                                   arena_, log_.get(), journal_, ns_, handles_, kernel_state_,
                                   specials_, durability_.flusher(),
                                   replicator ? replicator->run() : ""});
}

Filesystem::~Filesystem() {
  arena_.StopBackground();
  durability_.Stop();
  local_tier_.reset();  // Before the backing directory closes; the uploader is stopped.
  NamespaceLock lock(ns_.mutex());
  handles_.ClearLocked();  // Files the kernel never released (the mount went away).
  durability_.reclaimer().ClearLocked();
  env_->Close(store_.staging_fd);
  env_->Close(store_.root_fd);
}

Result<HandoffImage> Filesystem::Handoff() { return Takeover().Handoff(); }

void Filesystem::Retire() { durability_.HandOverSharedMount(); }

Status Filesystem::Restore(const HandoffImage& image) {
  return durability_.TookOver(Takeover().Restore(image));
}

Status Filesystem::RecoverCrashedWorker() {
  return durability_.TookOver(Takeover().RecoverCrashedWorker());
}

Status Filesystem::RecoverEarlierMount() {
  return durability_.TookOver(Takeover().RecoverEarlierMount());
}

void Filesystem::Start() {
  if (config_.prefault) {
    arena_.Prefault([this] { return NoFileOpenFor(policy::kPrefaultQuiet); });
  }
  arena_.WatchSystemMemory();
  durability_.Start();
  if (local_tier_) local_tier_->Start();
}

bool Filesystem::NoFileOpenFor(Clock::duration quiet) const {
  NamespaceLock lock(ns_.mutex());
  return handles_.NoFileOpenForLocked(quiet);
}

// ---------------------------------------------------------------------------------------------
// Operations.

Result<Attr> Filesystem::Lookup(uint64_t parent, const std::string& name) {
  if (Status bad = CheckName(name); !bad.ok()) return bad;
  if (SpecialNodes* special = specials_.ForEntry(parent, name)) {
    return special->Lookup(parent, name);
  }
  ListRemoteDir(parent);
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
  if (inode->lookups == 0 && inode->type == FileType::kRegular) {
    // The kernel dropped its inode, and its cached pages with it.
    MutexLock ilock(inode->mu);
    inode->page_cache_filled_version.reset();
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
  if (req.size) files_.WaitPassthroughReleased(ino);
  NamespaceLock lock(ns_.mutex());
  InodeRef inode = ns_.FindLocked(ino);
  if (!inode) return UnknownInode(ino);
  timespec now = WallTime();
  if (req.size) {
    files_.WaitPageCacheFilled(lock, inode);
    Status st = files_.TruncateLocked(inode, *req.size, handle, now, reservation);
    if (!st.ok()) return st;
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

Result<Attr> Filesystem::MkdirWithoutResendCheck(uint64_t parent, const std::string& name,
                                                 uint32_t mode, const Caller& c) {
  NamespaceLock lock(ns_.mutex());
  if (Status full = kernel_state_.RoomLocked(nullptr, 0); !full.ok()) return full;
  Result<InodeRef> made = ns_.MkdirLocked(parent, name, mode, c);
  if (!made.ok()) return made.status();
  (*made)->remote_listed = true;  // What it holds on the store is not this mount's.
  kernel_state_.RecordNodeLocked(*made);
  return ns_.AttrOf(**made);
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
  if (Status removed = ns_.UnlinkLocked(*dir, name, inode); !removed.ok()) return removed;
  kernel_state_.RecordPlaceLocked(inode);
  zarr_.ForgetIfGoneLocked(*dir);
  return Status::Ok();
}

Status Filesystem::RmdirWithoutResendCheck(uint64_t parent, const std::string& name) {
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
  ns_.RmdirLocked(*dir, name, inode);
  kernel_state_.RecordPlaceLocked(inode);
  return Status::Ok();
}

Result<Attr> Filesystem::SymlinkWithoutResendCheck(uint64_t parent, const std::string& name,
                                                   const std::string& target, const Caller& c) {
  if (target.size() >= 4096) return Status::Error(ENAMETOOLONG, "symlink target");
  NamespaceLock lock(ns_.mutex());
  Result<InodeRef> made = ns_.SymlinkLocked(parent, name, target, c);
  if (!made.ok()) return made.status();
  return ns_.AttrOf(**made);
}

Result<Attr> Filesystem::MknodWithoutResendCheck(uint64_t parent, const std::string& name,
                                                 uint32_t mode, uint64_t rdev, const Caller& c) {
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
  if (device && !store_.device_nodes) {
    return Status::Error(EPERM, name + ": the backing directory takes no device nodes");
  }
  if (SpecialNodes* special = specials_.ForEntry(parent, name)) {
    return special->Refuse(SpecialNodes::Change::kMknod, parent, name);
  }
  NamespaceLock lock(ns_.mutex());
  Result<InodeRef> made = ns_.MknodLocked(parent, name, mode, rdev, c);
  if (!made.ok()) return made.status();
  return ns_.AttrOf(**made);
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
  // A placeholder is fetched before it is renamed: the uploader puts the file under its new name.
  const uint64_t renamed = EntryIno(parent, name);
  PinLocal(renamed);
  if (Status fetched = FetchRemoteFile(renamed, O_RDONLY); !fetched.ok()) {
    UnpinLocal(renamed);
    return fetched;
  }
  Status st = Reserving(c, [&](Reservation& reservation, size_t& more) {
    return RenameReserved(parent, name, new_parent, new_name, flags, reservation, more);
  });
  UnpinLocal(renamed);
  if (!c.resent || st.err() != ENOENT || !HasEntry(new_parent, new_name)) return st;
  NoteAppliedBefore("rename", name);
  return Status::Ok();
}

Result<Attr> Filesystem::Mkdir(uint64_t parent, const std::string& name, uint32_t mode,
                               const Caller& c) {
  return EntryMadeBefore(MkdirWithoutResendCheck(parent, name, mode, c), c, "mkdir", parent,
                         name, S_IFDIR);
}

Status Filesystem::Rmdir(uint64_t parent, const std::string& name, const Caller& c) {
  Status st = RmdirWithoutResendCheck(parent, name);
  if (!c.resent || st.err() != ENOENT) return st;
  NoteAppliedBefore("rmdir", name);
  return Status::Ok();
}

Result<Attr> Filesystem::Symlink(uint64_t parent, const std::string& name,
                                 const std::string& target, const Caller& c) {
  return EntryMadeBefore(SymlinkWithoutResendCheck(parent, name, target, c), c, "symlink",
                         parent, name);
}

Result<Attr> Filesystem::Mknod(uint64_t parent, const std::string& name, uint32_t mode,
                               uint64_t rdev, const Caller& c) {
  return EntryMadeBefore(MknodWithoutResendCheck(parent, name, mode, rdev, c), c, "mknod",
                         parent, name);
}

Result<Attr> Filesystem::Link(uint64_t ino, uint64_t new_parent, const std::string& new_name,
                              const Caller& c) {
  // A placeholder is fetched before it gets a name the uploader puts on the store.
  PinLocal(ino);
  if (Status fetched = FetchRemoteFile(ino, O_RDONLY); !fetched.ok()) {
    UnpinLocal(ino);
    return fetched;
  }
  Result<Attr> linked = EntryMadeBefore(LinkWithoutResendCheck(ino, new_parent, new_name), c,
                                        "link", new_parent, new_name);
  UnpinLocal(ino);
  return linked;
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
  Result<OpenFile> made = CreateWithoutResendCheck(parent, name, mode, flags, c);
  if (!c.resent || !(flags & O_EXCL) || made.status().err() != EEXIST) return made;
  NoteAppliedBefore("create", name);
  return CreateWithoutResendCheck(parent, name, mode, flags & ~O_EXCL, c);
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
  Status bad = CheckNewName(new_parent, new_name);
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

Result<Attr> Filesystem::LinkWithoutResendCheck(uint64_t ino, uint64_t new_parent,
                                                const std::string& new_name) {
  if (SpecialNodes* special = specials_.ForNode(ino)) {
    return special->Refuse(SpecialNodes::Change::kLink, ino, "");
  }
  if (SpecialNodes* special = specials_.ForEntry(new_parent, new_name)) {
    return special->Refuse(SpecialNodes::Change::kLinkInto, new_parent, new_name);
  }
  Status bad = CheckNewName(new_parent, new_name);
  if (!bad.ok()) return bad;
  NamespaceLock lock(ns_.mutex());
  InodeRef inode = ns_.FindLocked(ino);
  if (!inode) return UnknownInode(ino);
  if (IsZarrView(*inode)) return Status::Error(EPERM, "hard link of a view of a zarr array");
  if (Status linked = ns_.LinkLocked(inode, new_parent, new_name); !linked.ok()) return linked;
  inode->lookups++;
  return ns_.AttrOf(*inode);
}

Result<OpenFile> Filesystem::CreateWithoutResendCheck(uint64_t parent, const std::string& name,
                                                      uint32_t mode, int flags, const Caller& c) {
  if (SpecialNodes* special = specials_.ForEntry(parent, name)) {
    return special->Refuse(SpecialNodes::Change::kCreate, parent, name);
  }
  Status bad = CheckNewName(parent, name);
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
      return files_.CreateLocked(*dir, name, mode, flags, c);
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
  if ((flags & O_ACCMODE) != O_RDONLY) files_.WaitPassthroughReleased(ino);
  PinLocal(ino);
  bool lazy = false;
  if ((flags & O_ACCMODE) == O_RDONLY) {
    Result<bool> made = OpenRemoteLazily(ino);
    if (!made.ok()) {
      UnpinLocal(ino);
      return made.status();
    }
    lazy = *made;
  } else if (Status fetched = FetchRemoteFile(ino, flags); !fetched.ok()) {
    UnpinLocal(ino);
    return fetched;
  }
  Result<OpenFile> opened = Reserving(c, [&](Reservation& reservation, size_t& more) {
    return files_.Open(ino, flags, c, reservation, more, /*may_bypass=*/!lazy);
  });
  UnpinLocal(ino);
  return opened;
}

Result<ReadData> Filesystem::Read(uint64_t handle, uint64_t offset, size_t size) {
  Handle* found = handles_.Find(handle);
  if (!found) return UnknownHandle(handle);
  if (SpecialFile* special = found->special()) return special->Read(offset, size);
  if (remote_reader_) {
    if (Status st = FetchForRead(found->file()->inode->ino, offset, size); !st.ok()) return st;
  }
  return files_.Read(*found->file(), offset, size);
}

Result<size_t> Filesystem::Write(uint64_t handle, uint64_t offset, const char* data,
                                 size_t size, const Caller& c) {
  Handle* found = handles_.Find(handle);
  if (!found) return UnknownHandle(handle);
  if (SpecialFile* special = found->special()) {
    return special->Write(std::string_view(data, size));
  }
  return files_.Write(*found->file(), offset, data, size, c);
}

Result<size_t> Filesystem::Write(uint64_t handle, uint64_t offset, LandedBytes& landed,
                                 const Caller& c) {
  Handle* found = handles_.Find(handle);
  if (!found) return UnknownHandle(handle);
  if (SpecialFile* special = found->special()) return special->Write(landed.Copied());
  return files_.Write(*found->file(), offset, landed, c);
}

Status Filesystem::Flush(uint64_t handle, uint64_t lock_owner) {
  Handle* found = handles_.Find(handle);
  if (!found) return UnknownHandle(handle);
  FileHandle* h = found->file();
  if (!h) return Status::Ok();
  return files_.Flush(*h, found->flags, lock_owner);
}

Status Filesystem::Release(uint64_t handle) {
  Handle* found = handles_.Find(handle);
  if (!found) return UnknownHandle(handle);
  NamespaceLock lock(ns_.mutex());
  if (FileHandle* h = found->file()) files_.ReleaseLocked(*h);
  handles_.RemoveLocked(found);
  return Status::Ok();
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
  if (config_.fsync_mode != FsyncMode::kWait) {
    if (config_.fsync_mode == FsyncMode::kReplicated) {
      if (Status st = durability_.WaitReplicated(seq); !st.ok()) return st;
    }
    MutexLock ilock(h->inode->mu);
    return h->inode->flush_error;
  }
  Status st = durability_.flusher().WaitDurable(seq);
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
  return files_.Fallocate(*h, mode, offset, length);
}

Result<uint64_t> Filesystem::OpenDir(uint64_t ino) {
  if (SpecialNodes* special = specials_.ForNode(ino)) {
    Result<std::vector<DirEntry>> entries = special->List(ino);
    if (!entries.ok()) return entries.status();
    return handles_.AddDir(std::move(*entries));
  }
  ListRemoteDir(ino);
  NamespaceLock lock(ns_.mutex());
  Result<InodeRef> dir = ns_.DirLocked(ino);
  if (!dir.ok()) return dir.status();
  return handles_.AddDir(ns_.ListLocked(*dir, ino));
}

void Filesystem::ListRemoteDir(uint64_t ino) {
  if (!remote_reader_) return;
  InodeRef dir;
  std::shared_ptr<BackingFile> backing;
  std::string path;
  {
    NamespaceLock lock(ns_.mutex());
    dir = ns_.FindLocked(ino);
    if (!dir || dir->type != FileType::kDirectory || dir->remote_listed || dir->zarr) return;
    if (dir->ino != kRootIno && dir->names.empty()) return;  // Removed.
    backing = dir->BackingDir();
    if (!backing) return;  // Not on the backing directory yet: made through this mount.
    path = dir->ino == kRootIno ? "" : ns_.PathLocked(dir);
  }
  const Uploader* uploader = durability_.uploader();
  // What this mount still has to send about a name: its removal (a whiteout, or one the uploader
  // holds), a version of it (one not durable yet, or held by the uploader), or nothing.
  const RemoteReader::Gate gate = [&](const std::string& name, const RemoteReader::Place& place) {
    NamespaceLock lock(ns_.mutex());
    policy::PendingChange pending = policy::PendingChange::kNone;
    auto child = dir->children.find(name);
    if (dir->whiteouts.count(name)) {
      pending = policy::PendingChange::kRemoval;
    } else if (child != dir->children.end() && !ns_.BackingOnlyLocked(child->second)) {
      pending = policy::PendingChange::kUpload;
    } else if (uploader) {
      pending = uploader->PendingOf(path.empty() ? name : path + "/" + name);
    }
    if (place(pending)) ns_.ForgetBackingNameLocked(dir, name);
  };
  const Status listed = remote_reader_->ListInto(backing->fd(), path, gate);
  NamespaceLock lock(ns_.mutex());
  if (!listed.ok()) {
    spdlog::warn("remote: listing /{} from the store: {} (shown as the backing directory has "
                 "it; listed again at its next lookup)", path, listed.ToString());
    return;
  }
  dir->remote_listed = true;
  dir->complete = false;  // Its backing directory is read again, with what the store added.
}

uint64_t Filesystem::EntryIno(uint64_t parent, const std::string& name) {
  NamespaceLock lock(ns_.mutex());
  Result<InodeRef> dir = ns_.DirLocked(parent);
  if (!dir.ok()) return 0;
  auto it = (*dir)->children.find(name);
  return it == (*dir)->children.end() ? 0 : it->second->ino;
}

Result<int> Filesystem::OpenPlaceholder(uint64_t ino, std::string* path) {
  NamespaceLock lock(ns_.mutex());
  InodeRef inode = ns_.FindLocked(ino);
  if (!inode || inode->type != FileType::kRegular) return -1;
  std::shared_ptr<BackingFile> base;
  {
    MutexLock inode_lock(inode->mu);
    base = inode->content.base();
  }
  int checked = -1;
  if (inode->origin_dir) {
    checked = openat(inode->origin_dir->fd(), inode->origin_name.c_str(),
                     O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  } else if (base) {
    checked = dup(base->fd());
  }
  if (checked < 0) return -1;  // No backing file: the open finds out what it has.
  int fd = -1;
  int open_error = 0;
  const bool placeholder = RemoteReader::IsPlaceholder(checked);
  if (placeholder) {
    fd = open(("/proc/self/fd/" + std::to_string(checked)).c_str(), O_RDWR | O_CLOEXEC);
    open_error = fd < 0 ? errno : 0;
  }
  close(checked);
  *path = ns_.PathLocked(inode);
  if (placeholder && fd < 0) {
    return Status::Error(open_error, "remote: opening the placeholder of " + *path);
  }
  return fd;
}

Status Filesystem::FetchRemoteFile(uint64_t ino, int flags) {
  if (!remote_reader_) return Status::Ok();
  if ((flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY) return Status::Ok();
  std::string path;
  Result<int> fd = OpenPlaceholder(ino, &path);
  if (!fd.ok()) return fd.status();
  if (*fd < 0) return Status::Ok();
  std::string etag;
  Status fetched = remote_reader_->Fetch(*fd, path, &etag);
  if (fetched.ok()) {
    MutexLock lock(lazy_mu_);
    lazy_files_.erase(ino);  // Whole now: what it knew of its ranges is moot.
  }
  struct stat st {};
  if (fetched.ok() && local_tier_ && fstat(*fd, &st) == 0) {
    local_tier_->OnStore(path, static_cast<uint64_t>(st.st_ino), static_cast<uint64_t>(st.st_size),
                         NanosOf(st.st_mtim), etag);
  }
  close(*fd);
  return fetched;
}

Result<bool> Filesystem::OpenRemoteLazily(uint64_t ino) {
  if (!remote_reader_) return false;
  {
    MutexLock lock(lazy_mu_);
    if (lazy_files_.count(ino)) return true;
  }
  std::string path;
  Result<int> fd = OpenPlaceholder(ino, &path);
  if (!fd.ok()) return fd.status();
  if (*fd < 0) return false;
  Result<std::shared_ptr<RemoteReader::LazyFile>> file = remote_reader_->OpenLazy(*fd, path);
  if (!file.ok()) return file.status();
  if (!*file) return false;
  MutexLock lock(lazy_mu_);
  lazy_files_.emplace(ino, std::move(*file));  // Another open's, when it was first.
  return true;
}

Status Filesystem::FetchForRead(uint64_t ino, uint64_t offset, size_t size) {
  std::shared_ptr<RemoteReader::LazyFile> file;
  {
    MutexLock lock(lazy_mu_);
    if (lazy_files_.empty()) return Status::Ok();
    auto it = lazy_files_.find(ino);
    if (it == lazy_files_.end()) return Status::Ok();
    file = it->second;
  }
  Result<bool> completed = remote_reader_->EnsureFetched(*file, offset, size);
  if (!completed.ok()) return completed.status();
  if (!*completed) return Status::Ok();
  {
    MutexLock lock(lazy_mu_);
    auto it = lazy_files_.find(ino);
    if (it != lazy_files_.end() && it->second == file) lazy_files_.erase(it);
  }
  struct stat st {};
  if (local_tier_ && fstat(file->fd(), &st) == 0) {
    local_tier_->OnStore(file->what(), static_cast<uint64_t>(st.st_ino),
                         static_cast<uint64_t>(st.st_size),
                         NanosOf(st.st_mtim), "");
  }
  return Status::Ok();
}

void Filesystem::PinLocal(uint64_t ino) {
  if (!local_tier_ || ino == 0) return;
  NamespaceLock lock(ns_.mutex());
  ++local_pins_[ino];
}

void Filesystem::UnpinLocal(uint64_t ino) {
  if (!local_tier_ || ino == 0) return;
  NamespaceLock lock(ns_.mutex());
  auto it = local_pins_.find(ino);
  if (it != local_pins_.end() && --it->second == 0) local_pins_.erase(it);
}

bool Filesystem::MayEvict(const std::string& path, const std::function<bool()>& evict) {
  NamespaceLock lock(ns_.mutex());
  InodeRef inode = ns_.FindLocked(kRootIno);
  for (size_t start = 0; inode && start <= path.size();) {
    const size_t end = std::min(path.find('/', start), path.size());
    auto it = inode->children.find(path.substr(start, end - start));
    // A name the namespace never took from the backing directory: nothing of it is held.
    if (it == inode->children.end()) return evict();
    inode = it->second;
    start = end + 1;
  }
  if (!inode || inode->type != FileType::kRegular || inode->open_handles > 0 ||
      local_pins_.count(inode->ino) || ns_.PendingLocked(inode)) {
    return false;
  }
  {
    MutexLock lock(lazy_mu_);
    if (lazy_files_.count(inode->ino)) return false;  // Not whole: not resident either.
  }
  MutexLock inode_lock(inode->mu);
  if (inode->durable_version != inode->version) return false;
  // Its content is then read from the backing file by name only, so its next open fetches it.
  if (!inode->origin_dir) stats_.evicted_blocks += durability_.reclaimer().UnloadLocked(inode);
  if (!inode->origin_dir) return false;
  return evict();
}

Result<std::vector<DirEntry>> Filesystem::ReadDir(uint64_t dir_handle, uint64_t offset) {
  return handles_.ReadDir(dir_handle, offset);
}

void Filesystem::ReleaseDir(uint64_t dir_handle) { handles_.ReleaseDir(dir_handle); }

Status Filesystem::FsyncDir(uint64_t ino) {
  if (config_.fsync_mode == FsyncMode::kDefer) return Status::Ok();
  if (config_.fsync_mode == FsyncMode::kReplicated) return durability_.WaitReplicated(SyncPoint());
  return Sync();
}

Result<struct statvfs> Filesystem::StatFs() {
  struct statvfs st {};
  if (Status got = env_->StatFs(store_.root_fd, &st); !got.ok()) {
    return Status::Error(got.err(), "statfs of backing directory");
  }
  return st;
}

Status Filesystem::Sync() { return WaitDurable(SyncPoint()); }

std::string Filesystem::StatsJson() {
  const Durability& d = durability_;
  return StatsReport{config_, stats_, arena_, journal_, ns_, zarr_, tensors_, d.flusher(),
                     d.shared_mount(), d.uploader(), d.replicator(), control_hooks_.request_stats,
                     control_hooks_.worker_info}
      .Json();
}

Status Filesystem::Shutdown() { return durability_.Drain(); }

uint64_t Filesystem::SyncPoint() { return journal_.last_seq(); }

Status Filesystem::WaitDurable(uint64_t point) { return durability_.WaitDurable(point); }

Status Filesystem::RequestUpgrade(const std::string& binary) {
  if (!control_hooks_.upgrade) {
    return Status::Error(EOPNOTSUPP, "this mount runs without a supervisor");
  }
  return control_hooks_.upgrade(binary);
}


}  // namespace ckptfs
