#include "core/filesystem.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "core/open_mode.h"
#include "core/policy.h"


namespace ckptfs {
namespace {

timespec Now() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts;
}

constexpr size_t kNameMax = 255;

Status CheckName(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return Status::Error(EINVAL, "bad name");
  }
  if (name.size() > kNameMax) return Status::Error(ENAMETOOLONG, name);
  return Status::Ok();
}

// Whether `temp` is the name zarr gives the temporary file it renames to `name`.
bool IsZarrTempName(const std::string& temp, const std::string& name) {
  constexpr size_t kUuidHex = 32;
  constexpr std::string_view kSuffix = ".partial";
  if (temp.size() != name.size() + 1 + kUuidHex + kSuffix.size()) return false;
  std::string_view t = temp;
  return t.substr(0, name.size() + 1) == name + "." && t.substr(t.size() - kSuffix.size()) == kSuffix &&
         t.substr(name.size() + 1, kUuidHex).find_first_not_of("0123456789abcdef") ==
             std::string_view::npos;
}

// The mode bits, owner and times of a backing file.
void TakeAttributes(Inode& inode, const struct stat& st) REQUIRES(inode.mu) {
  inode.mode = st.st_mode & 07777;
  inode.uid = st.st_uid;
  inode.gid = st.st_gid;
  inode.atime = st.st_atim;
  inode.mtime = st.st_mtim;
  inode.ctime = st.st_ctim;
}

// The attributes a journal entry gives the backing store: `inode`'s mode, owner and times.
void CopyAttributes(const Inode& inode, JournalEntry& e) REQUIRES(inode.mu) {
  e.mode = inode.mode;
  e.uid = inode.uid;
  e.gid = inode.gid;
  e.atime = inode.atime;
  e.mtime = inode.mtime;
}

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
  Result<BackingStore> store = OpenBackingStore(*env, config);
  if (!store.ok()) return store.status();
  return std::unique_ptr<Filesystem>(new Filesystem(config, *store, std::move(env), clock));
}

Filesystem::Filesystem(const Config& config, const BackingStore& store, std::unique_ptr<Env> env,
                       Clock& clock)
    : config_(WithFlushIo(config, store.flush_io)),
      env_(std::move(env)),
      device_nodes_(store.device_nodes),
      clock_(clock),
      root_fd_(store.root_fd),
      staging_fd_(store.staging_fd),
      start_time_(Now()),
      arena_(config.cache_size) {
  auto root = std::make_shared<Inode>(kRootIno, FileType::kDirectory);
  struct stat st {};
  (void)env_->Stat(root_fd_, "", &st);
  {
    MutexLock lock(root->mu);
    TakeAttributes(*root, st);
  }
  root->nlink = 2;
  root->on_backing = true;
  root->SetBackingDir(std::make_shared<BackingFile>(*env_, dup(root_fd_)));
  inodes_[kRootIno] = root;
  last_open_or_release_ = clock_.Now();

  flusher_ = std::make_unique<Flusher>(config_, *env_, clock_, staging_fd_, journal_, stats_,
                                       static_cast<FlushClient&>(*this));
  arena_.SetReclaimer([this](size_t wanted) { return Reclaim(wanted); });
  arena_.SetPressureCallback([this] { flusher_->Hurry(); });
}

Filesystem::~Filesystem() {
  arena_.StopPrefault();
  flusher_.reset();
  {
    NamespaceLock lock(ns_mu_);
    for (auto& [ino, inode] : inodes_) {
      inode->children.clear();
      inode->names.clear();
      inode->last_entry.reset();
      inode->zarr.reset();
      MutexLock ilock(inode->mu);
      inode->view.reset();
    }
    handles_.clear();  // Files the kernel never released (the mount went away).
    inodes_.clear();
    clean_.clear();
  }
  env_->Close(staging_fd_);
  env_->Close(root_fd_);
}

void Filesystem::Start() {
  if (config_.prefault) {
    arena_.Prefault([this] { return NoFileOpenFor(policy::kPrefaultQuiet); });
  }
  flusher_->Start();
  spdlog::debug("flusher started with the {} backend", flusher_->backend_name());
}

// ---------------------------------------------------------------------------------------------
// Namespace helpers (ns_mu_ held).

InodeRef Filesystem::FindLocked(uint64_t ino) const {
  auto it = inodes_.find(ino);
  return it == inodes_.end() ? nullptr : it->second;
}

Result<InodeRef> Filesystem::DirLocked(uint64_t ino) const {
  InodeRef dir = FindLocked(ino);
  if (!dir) return Status::Error(ENOENT, "no such inode");
  if (dir->type != FileType::kDirectory) return Status::Error(ENOTDIR, "not a directory");
  return dir;
}

InodeRef Filesystem::NewInodeLocked(FileType type, uint32_t mode, const Caller& c) {
  auto inode = std::make_shared<Inode>(next_ino_++, type);
  {
    MutexLock lock(inode->mu);
    inode->mode = mode & 07777;
    inode->uid = c.uid;
    inode->gid = c.gid;
    inode->atime = inode->mtime = inode->ctime = Now();
  }
  inode->nlink = type == FileType::kDirectory ? 2 : 1;
  inodes_[inode->ino] = inode;
  return inode;
}

Result<InodeRef> Filesystem::ChildLocked(const InodeRef& dir, const std::string& name) {
  if (auto it = dir->children.find(name); it != dir->children.end()) return it->second;
  if (dir->complete || !dir->BackingDir() || dir->whiteouts.count(name) ||
      (dir->ino == kRootIno && name == kReservedName)) {
    return Status::Error(ENOENT, name);
  }
  Status bad = CheckName(name);
  if (!bad.ok()) return bad;
  Result<InodeRef> inode = BackingInodeLocked(dir, name);
  if (!inode.ok()) return inode;
  dir->children[name] = *inode;
  (*inode)->names.insert({dir, name});
  if ((*inode)->type == FileType::kDirectory) ZarrProbeLocked(*inode);
  return inode;
}

Result<InodeRef> Filesystem::BackingInodeLocked(const InodeRef& dir, const std::string& name) {
  int dfd = dir->BackingDir()->fd();
  struct stat st {};
  if (Status found = env_->Stat(dfd, name, &st); !found.ok()) return found;
  const std::pair<uint64_t, uint64_t> backing_id{st.st_dev, st.st_ino};
  const bool linkable = !S_ISDIR(st.st_mode) && !S_ISLNK(st.st_mode);
  if (linkable && st.st_nlink > 1) {
    // Another name of a hard-linked file seen already: the same inode.
    auto it = backing_links_.find(backing_id);
    InodeRef linked = it == backing_links_.end() ? nullptr : it->second.lock();
    if (linked && linked->nlink > 0) return linked;
  }
  FileType type;
  if (S_ISDIR(st.st_mode)) {
    type = FileType::kDirectory;
  } else if (S_ISREG(st.st_mode)) {
    type = FileType::kRegular;
  } else if (S_ISLNK(st.st_mode)) {
    type = FileType::kSymlink;
  } else {
    type = FileType::kSpecial;
  }
  auto inode = std::make_shared<Inode>(next_ino_++, type);
  {
    MutexLock lock(inode->mu);
    TakeAttributes(*inode, st);
    if (type == FileType::kRegular) {
      inode->content = FileContent(nullptr, static_cast<uint64_t>(st.st_size));
    }
  }
  if (type == FileType::kSpecial) {
    inode->special_type = st.st_mode & S_IFMT;
    inode->rdev = S_ISCHR(st.st_mode) || S_ISBLK(st.st_mode) ? st.st_rdev : 0;
  }
  inode->nlink = type == FileType::kSymlink ? 1 : static_cast<uint32_t>(st.st_nlink);
  inode->on_backing = true;
  if (linkable && st.st_nlink > 1) backing_links_[backing_id] = inode;
  if (type == FileType::kDirectory) {
    Result<int> fd = env_->Open(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (!fd.ok()) return fd.status();
    inode->SetBackingDir(std::make_shared<BackingFile>(*env_, *fd));
  } else if (type == FileType::kRegular) {
    inode->origin_dir = dir->BackingDir();
    inode->origin_name = name;
  } else if (type == FileType::kSymlink) {
    Result<std::string> target = env_->ReadLink(dfd, name);
    if (!target.ok()) return target.status();
    inode->symlink_target = std::move(*target);
  }
  inodes_[inode->ino] = inode;
  return inode;
}

Status Filesystem::CheckAbsentLocked(const InodeRef& dir, const std::string& name) {
  Result<InodeRef> existing = ChildLocked(dir, name);
  if (existing.ok()) return Status::Error(EEXIST, name);
  if (existing.status().err() != ENOENT) return existing.status();
  if (dir->zarr && dir->zarr->grid.Virtual(name)) {
    // A chunk of a fine-grid array comes into being only by zarr's rename over it.
    return Status::Error(EPERM, name + " is a chunk of a zarr array");
  }
  return Status::Ok();
}

void Filesystem::LoadDirLocked(const InodeRef& dir) {
  if (dir->complete) return;
  std::shared_ptr<BackingFile> backing = dir->BackingDir();
  if (!backing) {
    dir->complete = true;
    return;
  }
  Result<std::vector<std::string>> listed = env_->ListDir(backing->fd());
  if (!listed.ok()) return;
  // Chosen before any is added: a fine grid's virtual chunks may share names with real ones.
  std::erase_if(*listed, [&](const std::string& name) REQUIRES(ns_lock) {
    return (dir->ino == kRootIno && name == kReservedName) || dir->children.count(name) ||
           dir->whiteouts.count(name);
  });
  for (const std::string& name : *listed) {
    if (dir->zarr && ZarrAddBackingLocked(dir, name)) continue;
    Result<InodeRef> child = ChildLocked(dir, name);
    (void)child;  // Entries that vanished or are special files are simply not listed.
  }
  dir->complete = true;
  dir->whiteouts.clear();
}

void Filesystem::AddNameLocked(const InodeRef& dir, const std::string& name,
                               const InodeRef& inode) {
  dir->children[name] = inode;
  dir->whiteouts.erase(name);
  inode->names.insert({dir, name});
  MutexLock lock(dir->mu);
  dir->mtime = dir->ctime = Now();
}

void Filesystem::RemoveNameLocked(const InodeRef& dir, const std::string& name,
                                  const InodeRef& inode, bool journal) {
  if (journal) JournalRemovalLocked(dir, name, inode);
  dir->children.erase(name);
  // The backing store may still hold this name until the journal says otherwise.
  if (!dir->complete) dir->whiteouts.insert(name);
  inode->names.erase({dir, name});
  MutexLock lock(dir->mu);
  dir->mtime = dir->ctime = Now();
}

void Filesystem::JournalRemovalLocked(const InodeRef& dir, const std::string& name,
                                      const InodeRef& inode) {
  if (!JournaledLocked(inode)) return;
  auto e = std::make_shared<JournalEntry>();
  e->kind = inode->type == FileType::kDirectory ? JournalEntry::Kind::kRmdir
                                                : JournalEntry::Kind::kUnlink;
  e->inode = dir;
  e->parent = dir;
  e->name = name;
  e->victim = inode;
  AppendLocked(std::move(e));
}

Status Filesystem::LoadOriginLocked(const InodeRef& inode) {
  if (!inode->origin_dir) return Status::Ok();
  Result<int> fd = env_->Open(inode->origin_dir->fd(), inode->origin_name, O_RDONLY | O_NOFOLLOW);
  if (!fd.ok()) {
    return Status::Error(fd.status().err(), "open backing file " + inode->origin_name);
  }
  auto file = std::make_shared<BackingFile>(*env_, *fd);
  struct stat st {};
  (void)env_->Stat(*fd, "", &st);
  {
    MutexLock lock(inode->mu);
    inode->content = FileContent(std::move(file), static_cast<uint64_t>(st.st_size));
  }
  inode->origin_dir.reset();
  inode->origin_name.clear();
  return Status::Ok();
}

bool Filesystem::JournaledLocked(const InodeRef& inode) const {
  {
    MutexLock lock(inode->mu);
    if (inode->view) return false;  // Virtual chunks never reach the backing store.
  }
  EntryRef last = inode->last_entry.lock();
  return inode->on_backing || (last && journal_.Pending(last));
}

uint64_t Filesystem::AppendLocked(EntryRef entry) {
  entry->sealed_at = clock_.Now();
  // An unlink or rmdir is about its victim, though it names the directory as its inode: the
  // removal may be cancelled with the victim, and must not then leave the directory looking as
  // if its own pending entries (a mkdir) were done.
  if (entry->kind != JournalEntry::Kind::kUnlink && entry->kind != JournalEntry::Kind::kRmdir) {
    entry->inode->last_entry = entry;
  }
  uint64_t seq = journal_.Append(std::move(entry));
  flusher_->Notify();
  return seq;
}

uint64_t Filesystem::SealLocked(const InodeRef& inode) {
  if (inode->type != FileType::kRegular) return 0;
  if (InodeRef owner = ContentOwner(inode); owner != inode) return SealLocked(owner);
  auto entry = std::make_shared<JournalEntry>();
  {
    MutexLock lock(inode->mu);
    if (inode->version == inode->sealed_version) return 0;
    inode->sealed_version = inode->version;
    if (inode->names.empty()) return 0;  // Deleted: nothing to publish.
    if (inode->nlink > inode->names.size()) {
      spdlog::warn("{} has {} hard links on the backing store not opened through the mount; "
                   "they keep the old content", inode->names.begin()->name,
                   inode->nlink - inode->names.size());
    }
    entry->kind = JournalEntry::Kind::kPublish;
    entry->inode = inode;
    entry->snapshot = inode->content;
    entry->version = inode->version;
    entry->names.assign(inode->names.begin(), inode->names.end());
    entry->parent = entry->names.front().parent;
    entry->name = entry->names.front().name;
    CopyAttributes(*inode, *entry);
  }
  const Clock::time_point now = clock_.Now();
  inode->hold = policy::NextHold(inode->hold, now - inode->last_sealed, config_.flush_delay);
  inode->last_sealed = now;
  entry->hold = inode->hold;
  EntryRef last = inode->last_entry.lock();
  if (last && last->kind == JournalEntry::Kind::kPublish && journal_.Cancel(last)) {
    stats_.versions_skipped++;
  }
  return AppendLocked(std::move(entry));
}

uint64_t Filesystem::AdoptHandleLocked(std::unique_ptr<Handle> handle) {
  Handle* h = handle.get();
  if (h->inode) {
    ++open_files_;
    last_open_or_release_ = clock_.Now();
  }
  handles_.emplace(h, std::move(handle));
  return reinterpret_cast<uint64_t>(h);
}

bool Filesystem::NoFileOpenFor(Clock::duration quiet) const {
  NamespaceLock lock(ns_mu_);
  return open_files_ == 0 && clock_.Now() - last_open_or_release_ >= quiet;
}

void Filesystem::SealHandleLocked(Handle* h) {
  InodeRef owner = ContentOwner(h->inode);
  bool changed;
  {
    MutexLock lock(owner->mu);
    changed = h->wrote_version > owner->sealed_version;
  }
  if (changed) SealLocked(owner);
}

bool Filesystem::IsZarrView(const Inode& inode) {
  MutexLock lock(inode.mu);
  return inode.view || !inode.served_text.empty();
}

InodeRef Filesystem::ContentOwner(const InodeRef& inode) {
  MutexLock lock(inode->mu);
  return inode->view ? inode->view->real : inode;
}

std::string Filesystem::PathLocked(const InodeRef& inode) const {
  std::vector<std::string> parts;
  const Inode* cur = inode.get();
  while (cur && cur->ino != kRootIno) {
    if (cur->names.empty()) {
      parts.push_back("(deleted)");
      break;
    }
    parts.push_back(cur->names.begin()->name);
    cur = cur->names.begin()->parent.get();
  }
  std::string path;
  for (auto it = parts.rbegin(); it != parts.rend(); ++it) path += (path.empty() ? "" : "/") + *it;
  return path.empty() ? "/" : path;
}

Attr Filesystem::AttrOf(const Inode& inode) const {
  Attr a;
  a.ino = inode.ino;
  a.nlink = inode.nlink;
  MutexLock lock(inode.mu);
  a.mode = inode.TypeBits() | inode.mode;
  a.uid = inode.uid;
  a.gid = inode.gid;
  a.atime = inode.atime;
  a.mtime = inode.mtime;
  a.ctime = inode.ctime;
  switch (inode.type) {
    case FileType::kRegular:
      a.size = inode.served_text.empty() ? inode.content.size() : inode.served_text.size();
      break;
    case FileType::kSymlink: a.size = inode.symlink_target.size(); break;
    case FileType::kDirectory: a.size = 4096; break;
    case FileType::kSpecial: a.rdev = inode.rdev; break;
  }
  return a;
}

void Filesystem::MaybeDropLocked(const InodeRef& inode) {
  if (inode->nlink > 0 || inode->open_handles > 0) return;
  // Deleted and closed: its data is unreachable now, even while the kernel still knows the inode.
  if (inode->type == FileType::kRegular) {
    MutexLock ilock(inode->mu);
    inode->content = FileContent();
  }
  inode->origin_dir.reset();
  if (inode->lookups == 0) inodes_.erase(inode->ino);
}

size_t Filesystem::UnloadLocked(const InodeRef& inode) {
  EntryRef pending = inode->last_entry.lock();
  if (inode->type != FileType::kRegular || inode->open_handles > 0 || inode->names.empty() ||
      inode->view || inode->origin_dir || !inode->on_backing ||
      (pending && journal_.Pending(pending)) || inode->durable_version != inode->version) {
    return 0;
  }
  const Inode::Name& name = *inode->names.begin();
  std::shared_ptr<BackingFile> parent_dir = name.parent->BackingDir();
  if (!parent_dir) return 0;
  size_t blocks = inode->content.memory_blocks();
  inode->content = FileContent(nullptr, inode->content.size());
  inode->origin_dir = std::move(parent_dir);
  inode->origin_name = name.name;
  return blocks;
}

size_t Filesystem::Reclaim(size_t wanted) {
  NamespaceLock lock(ns_mu_);
  size_t freed = 0;
  while (freed < wanted && !clean_.empty()) {
    InodeRef inode = clean_.front().lock();
    clean_.pop_front();
    if (!inode) continue;
    if (!inode->mu.try_lock()) {
      clean_.push_back(inode);
      break;
    }
    size_t blocks = UnloadLocked(inode);
    inode->mu.unlock();
    freed += blocks;
    stats_.evicted_blocks += blocks;
  }
  return freed;
}

size_t Filesystem::Spill(Env& env) {
  InodeRef victim;
  {
    NamespaceLock lock(ns_mu_);
    size_t most = 0;
    for (const auto& [ino, inode] : inodes_) {
      if (inode->type != FileType::kRegular) continue;
      if (!inode->mu.try_lock()) continue;
      if (inode->version != inode->sealed_version && inode->content.memory_blocks() > most) {
        most = inode->content.memory_blocks();
        victim = inode;
      }
      inode->mu.unlock();
    }
  }
  if (!victim) return 0;
  // The file's lock is held throughout: its content cannot change under the spill.
  MutexLock ilock(victim->mu);
  FileContent& content = victim->content;
  auto spilled = content.SpillCandidates();
  if (spilled.empty()) return 0;
  std::shared_ptr<BackingFile> file = content.base();
  // Reusable only when no sealed version shares it (then this copy and the content's are all).
  bool reuse = file && file->spill() && file.use_count() == 2;
  if (reuse) {
    if (!env.Truncate(file->fd(), content.base_len()).ok()) return 0;
  } else {
    Result<int> fd = env.Open(staging_fd_, ".", O_TMPFILE | O_RDWR, 0600);
    if (!fd.ok()) {
      spdlog::error("cannot create a spill file: {}", fd.status().ToString());
      return 0;
    }
    file = std::make_shared<BackingFile>(env, *fd, /*spill=*/true);
    if (content.base() && content.base_len() > 0) {
      Status st = content.base()->CopyPrefixTo(*fd, content.base_len());
      if (!st.ok()) {
        spdlog::error("cannot spill: {}", st.ToString());
        return 0;
      }
    }
  }
  std::vector<WriteRequest> requests =
      BlockWriteRequests(spilled, content.size(), file->fd(), /*direct=*/false);
  for (const Status& st : env.Write(requests)) {
    if (!st.ok()) {
      spdlog::error("cannot spill: {}", st.ToString());
      return 0;
    }
  }
  size_t freed = content.AdoptSpill(std::move(file), spilled);
  stats_.spilled_blocks += freed;
  return freed;
}

// ---------------------------------------------------------------------------------------------
// Operations.

Result<Attr> Filesystem::Lookup(uint64_t parent, const std::string& name) {
  if (parent == kRootIno && name == kReservedName) return ControlAttr(kControlDirIno);
  if (parent == kControlDirIno) {
    Result<uint64_t> c = ControlLookup(name);
    if (!c.ok()) return c.status();
    return ControlAttr(*c);
  }
  NamespaceLock lock(ns_mu_);
  Result<InodeRef> dir = DirLocked(parent);
  if (!dir.ok()) return dir.status();
  Result<InodeRef> child = ChildLocked(*dir, name);
  if (!child.ok()) return child.status();
  (*child)->lookups++;
  return AttrOf(**child);
}

void Filesystem::Forget(uint64_t ino, uint64_t count) {
  if (ino < kFirstIno) return;
  NamespaceLock lock(ns_mu_);
  InodeRef inode = FindLocked(ino);
  if (!inode) return;
  inode->lookups -= std::min(inode->lookups, count);
  MaybeDropLocked(inode);
}

Result<Attr> Filesystem::GetAttr(uint64_t ino) {
  if (ino != kRootIno && ino < kFirstIno) return ControlAttr(ino);
  NamespaceLock lock(ns_mu_);
  InodeRef inode = FindLocked(ino);
  if (!inode) return Status::Error(ENOENT, "no such inode");
  return AttrOf(*inode);
}

Result<Attr> Filesystem::SetAttr(uint64_t ino, const SetAttrRequest& req, uint64_t handle) {
  if (ino != kRootIno && ino < kFirstIno) return Status::Error(EPERM, "control files are fixed");
  Reservation reservation;
  if (req.size) reservation = arena_.Reserve(1);
  if (req.size) WaitPassthroughReleased(ino);
  NamespaceLock lock(ns_mu_);
  InodeRef inode = FindLocked(ino);
  if (!inode) return Status::Error(ENOENT, "no such inode");
  timespec now = Now();
  if (req.size) {
    if (inode->type == FileType::kDirectory) return Status::Error(EISDIR, "truncate of a directory");
    if (inode->type != FileType::kRegular) {
      return Status::Error(EINVAL, "truncate of a symlink or special file");
    }
    if (IsZarrView(*inode)) return Status::Error(EPERM, "a view of a zarr array has a fixed size");
    if (inode->passthrough_handles > 0) {
      return Status::Error(ETXTBSY, "truncate while read through FUSE passthrough");
    }
    Status st = LoadOriginLocked(inode);
    if (!st.ok()) return st;
    MutexLock ilock(inode->mu);
    inode->content.Truncate(*req.size, reservation);
    inode->version++;
    inode->mtime = inode->ctime = now;
    if (handle != 0) HandleOf(handle)->wrote_version = inode->version;
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
  if (req.size && handle == 0) SealLocked(inode);
  if (meta && inode->ino == kRootIno) {
    spdlog::debug("attributes of the mount root are not written to the backing directory");
  } else if (meta) {
    JournalAttrsLocked(inode, req.mode.has_value(), req.uid || req.gid, req.atime || req.mtime);
  }
  return AttrOf(*inode);
}

void Filesystem::JournalAttrsLocked(const InodeRef& inode, bool set_mode, bool set_owner,
                                    bool set_times) {
  if (!JournaledLocked(inode) || inode->names.empty()) return;
  auto e = std::make_shared<JournalEntry>();
  e->kind = JournalEntry::Kind::kSetAttr;
  e->inode = inode;
  e->parent = inode->names.begin()->parent;
  e->name = inode->names.begin()->name;
  e->set_mode = set_mode;
  e->set_owner = set_owner;
  e->set_times = set_times;
  {
    MutexLock ilock(inode->mu);
    CopyAttributes(*inode, *e);
  }
  AppendLocked(std::move(e));
}

Result<EntryRef> Filesystem::AddNewLocked(uint64_t parent, const std::string& name,
                                           FileType type, uint32_t mode, const Caller& c,
                                           JournalEntry::Kind kind) {
  if (parent == kRootIno && name == kReservedName) return Status::Error(EEXIST, name);
  Status bad = CheckName(name);
  if (!bad.ok()) return bad;
  Result<InodeRef> dir = DirLocked(parent);
  if (!dir.ok()) return dir.status();
  if (Status absent = CheckAbsentLocked(*dir, name); !absent.ok()) return absent;
  InodeRef inode = NewInodeLocked(type, mode, c);
  AddNameLocked(*dir, name, inode);
  inode->lookups++;
  auto e = std::make_shared<JournalEntry>();
  e->kind = kind;
  e->inode = inode;
  e->parent = *dir;
  e->name = name;
  MutexLock ilock(inode->mu);
  CopyAttributes(*inode, *e);
  return e;
}

Result<Attr> Filesystem::Mkdir(uint64_t parent, const std::string& name, uint32_t mode,
                               const Caller& c) {
  NamespaceLock lock(ns_mu_);
  Result<EntryRef> e =
      AddNewLocked(parent, name, FileType::kDirectory, mode, c, JournalEntry::Kind::kMkdir);
  if (!e.ok()) return e.status();
  InodeRef inode = (*e)->inode;
  inode->complete = true;
  (*e)->parent->nlink++;
  AppendLocked(std::move(*e));
  return AttrOf(*inode);
}

Status Filesystem::Unlink(uint64_t parent, const std::string& name) {
  return Reserving([&](Reservation& reservation, size_t& more) {
    return UnlinkReserved(parent, name, reservation, more);
  });
}

Status Filesystem::UnlinkReserved(uint64_t parent, const std::string& name,
                                  Reservation& reservation, size_t& more) {
  if (parent == kRootIno && name == kReservedName) return Status::Error(EPERM, name);
  if (parent == kControlDirIno) return Status::Error(EPERM, name);
  NamespaceLock lock(ns_mu_);
  Result<InodeRef> dir = DirLocked(parent);
  if (!dir.ok()) return dir.status();
  Result<InodeRef> child = ChildLocked(*dir, name);
  if (!child.ok()) return child.status();
  InodeRef inode = *child;
  if (inode->type == FileType::kDirectory) return Status::Error(EISDIR, name);
  if (ContentOwner(inode) != inode) return ZarrUnlinkLocked(*dir, name, inode, reservation, more);
  if (inode->nlink > 1 || inode->open_handles > 0 || inode->lookups > 0) {
    Status st = LoadOriginLocked(inode);
    if (!st.ok()) return st;
  }
  RemoveNameLocked(*dir, name, inode);
  inode->nlink--;
  {
    MutexLock ilock(inode->mu);
    inode->ctime = Now();
  }
  if (inode->nlink == 0) {
    stats_.versions_skipped += journal_.CancelUnsent(inode);
    MaybeDropLocked(inode);
  }
  ZarrForgetIfGoneLocked(*dir);
  return Status::Ok();
}

Status Filesystem::Rmdir(uint64_t parent, const std::string& name) {
  if (parent == kRootIno && name == kReservedName) return Status::Error(EPERM, name);
  if (parent == kControlDirIno) return Status::Error(ENOTDIR, name);
  NamespaceLock lock(ns_mu_);
  Result<InodeRef> dir = DirLocked(parent);
  if (!dir.ok()) return dir.status();
  Result<InodeRef> child = ChildLocked(*dir, name);
  if (!child.ok()) return child.status();
  InodeRef inode = *child;
  if (inode->type != FileType::kDirectory) return Status::Error(ENOTDIR, name);
  LoadDirLocked(inode);
  if (!inode->children.empty() || (inode->zarr && inode->zarr->hidden > 0)) {
    return Status::Error(ENOTEMPTY, name);
  }
  inode->zarr.reset();
  RemoveNameLocked(*dir, name, inode);
  inode->nlink = 0;
  (*dir)->nlink--;
  stats_.versions_skipped += journal_.CancelUnsent(inode);
  MaybeDropLocked(inode);
  return Status::Ok();
}

Result<Attr> Filesystem::Symlink(uint64_t parent, const std::string& name,
                                 const std::string& target, const Caller& c) {
  if (target.size() >= 4096) return Status::Error(ENAMETOOLONG, "symlink target");
  NamespaceLock lock(ns_mu_);
  Result<EntryRef> e =
      AddNewLocked(parent, name, FileType::kSymlink, 0777, c, JournalEntry::Kind::kSymlink);
  if (!e.ok()) return e.status();
  InodeRef inode = (*e)->inode;
  inode->symlink_target = target;
  (*e)->symlink_target = target;
  AppendLocked(std::move(*e));
  return AttrOf(*inode);
}

Result<Attr> Filesystem::Mknod(uint64_t parent, const std::string& name, uint32_t mode,
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
  if (parent == kControlDirIno) return Status::Error(EPERM, "the control directory is fixed");
  NamespaceLock lock(ns_mu_);
  Result<EntryRef> e =
      AddNewLocked(parent, name, FileType::kSpecial, mode, c, JournalEntry::Kind::kMknod);
  if (!e.ok()) return e.status();
  InodeRef inode = (*e)->inode;
  inode->special_type = type;
  inode->rdev = device ? rdev : 0;
  (*e)->node_type = type;
  (*e)->rdev = inode->rdev;
  AppendLocked(std::move(*e));
  return AttrOf(*inode);
}

Result<std::string> Filesystem::Readlink(uint64_t ino) {
  NamespaceLock lock(ns_mu_);
  InodeRef inode = FindLocked(ino);
  if (!inode) return Status::Error(ENOENT, "no such inode");
  if (inode->type != FileType::kSymlink) return Status::Error(EINVAL, "not a symlink");
  return inode->symlink_target;
}

Status Filesystem::Rename(uint64_t parent, const std::string& name, uint64_t new_parent,
                          const std::string& new_name, unsigned flags) {
  return Reserving([&](Reservation& reservation, size_t& more) {
    return RenameReserved(parent, name, new_parent, new_name, flags, reservation, more);
  });
}

Status Filesystem::RenameReserved(uint64_t parent, const std::string& name, uint64_t new_parent,
                                  const std::string& new_name, unsigned flags,
                                  Reservation& reservation, size_t& more) {
  if ((parent == kRootIno && name == kReservedName) ||
      (new_parent == kRootIno && new_name == kReservedName) || parent == kControlDirIno ||
      new_parent == kControlDirIno) {
    return Status::Error(EPERM, "the control directory cannot be renamed");
  }
  if (flags & ~static_cast<unsigned>(RENAME_NOREPLACE)) {
    return Status::Error(EINVAL, "only RENAME_NOREPLACE is supported");
  }
  Status bad = CheckName(new_name);
  if (!bad.ok()) return bad;
  NamespaceLock lock(ns_mu_);
  Result<InodeRef> src = DirLocked(parent);
  if (!src.ok()) return src.status();
  Result<InodeRef> dst = DirLocked(new_parent);
  if (!dst.ok()) return dst.status();
  Result<InodeRef> child_r = ChildLocked(*src, name);
  if (!child_r.ok()) return child_r.status();
  InodeRef child = *child_r;
  Result<InodeRef> victim_r = ChildLocked(*dst, new_name);
  if (!victim_r.ok() && victim_r.status().err() != ENOENT) return victim_r.status();
  InodeRef victim = victim_r.ok() ? *victim_r : nullptr;
  if (victim == child) return Status::Ok();
  if (victim && (flags & RENAME_NOREPLACE)) return Status::Error(EEXIST, new_name);
  // What the mount shows of a fine-grid array is not a file of its own: mv copies it instead.
  if (IsZarrView(*child)) return Status::Error(EXDEV, name + " is a view of a zarr array");
  const bool zarray = new_name == ".zarray" && child->type == FileType::kRegular;
  if (const auto& array = (*dst)->zarr) {
    if (auto vc = array->grid.Virtual(new_name)) {
      if (child->type != FileType::kRegular) return Status::Error(EPERM, new_name + " is a chunk");
      return ZarrRenameInLocked(*src, name, child, *dst, new_name, *vc, reservation, more);
    }
    if (zarray) {
      Status st = ZarrCheckZarrayLocked(*dst, child, reservation, more);
      if (!st.ok() || more > 0) return st;
    }
  }
  if (child->type == FileType::kDirectory) {
    for (const Inode* cur = dst->get(); cur && cur->ino != kRootIno;
         cur = cur->names.empty() ? nullptr : cur->names.begin()->parent.get()) {
      if (cur == child.get()) return Status::Error(EINVAL, "directory moved into itself");
    }
    if (victim) {
      if (victim->type != FileType::kDirectory) return Status::Error(ENOTDIR, new_name);
      LoadDirLocked(victim);
      if (!victim->children.empty()) return Status::Error(ENOTEMPTY, new_name);
    }
  } else if (victim && victim->type == FileType::kDirectory) {
    return Status::Error(EISDIR, new_name);
  }
  Status st = LoadOriginLocked(child);
  if (!st.ok()) return st;
  if (victim && (victim->nlink > 1 || victim->open_handles > 0 || victim->lookups > 0)) {
    st = LoadOriginLocked(victim);
    if (!st.ok()) return st;
  }
  if (JournaledLocked(child)) {
    auto e = std::make_shared<JournalEntry>();
    e->kind = JournalEntry::Kind::kRename;
    e->inode = child;
    e->parent = *src;
    e->name = name;
    e->new_parent = *dst;
    e->new_name = new_name;
    e->victim = victim;
    AppendLocked(std::move(e));
  }
  RemoveNameLocked(*src, name, child, /*journal=*/false);
  if (victim) {
    // Unless the rename itself replaces it on the backing store, the old file must go there now:
    // the new one reaches the backing store only at its seal.
    RemoveNameLocked(*dst, new_name, victim, /*journal=*/!JournaledLocked(child));
    victim->nlink = victim->type == FileType::kDirectory ? 0 : victim->nlink - 1;
    if (victim->type == FileType::kDirectory) (*dst)->nlink--;
  }
  AddNameLocked(*dst, new_name, child);
  if (child->type == FileType::kDirectory && *src != *dst) {
    (*src)->nlink--;
    (*dst)->nlink++;
  }
  {
    MutexLock ilock(child->mu);
    child->ctime = Now();
  }
  if (victim && victim->nlink == 0) {
    stats_.versions_skipped += journal_.CancelUnsent(victim);
    MaybeDropLocked(victim);
  }
  if (zarray && (*dst)->zarr) {
    ZarrZarrayReplacedLocked(*dst, child, reservation);
  } else if (zarray && *src == *dst && IsZarrTempName(name, new_name)) {
    ZarrAdoptLocked(*dst, child);
  }
  return Status::Ok();
}

Result<Attr> Filesystem::Link(uint64_t ino, uint64_t new_parent, const std::string& new_name) {
  if (ino < kFirstIno) return Status::Error(EPERM, "hard link of a control file");
  if (new_parent == kRootIno && new_name == kReservedName) return Status::Error(EEXIST, new_name);
  Status bad = CheckName(new_name);
  if (!bad.ok()) return bad;
  NamespaceLock lock(ns_mu_);
  InodeRef inode = FindLocked(ino);
  if (!inode) return Status::Error(ENOENT, "no such inode");
  if (inode->type == FileType::kDirectory) return Status::Error(EPERM, "hard link of a directory");
  Result<InodeRef> dst = DirLocked(new_parent);
  if (!dst.ok()) return dst.status();
  if (Status absent = CheckAbsentLocked(*dst, new_name); !absent.ok()) return absent;
  if (inode->names.empty()) return Status::Error(ENOENT, "link of a deleted file");
  if (IsZarrView(*inode)) return Status::Error(EPERM, "hard link of a view of a zarr array");
  SealLocked(inode);
  if (JournaledLocked(inode)) {
    auto e = std::make_shared<JournalEntry>();
    e->kind = JournalEntry::Kind::kLink;
    e->inode = inode;
    e->parent = inode->names.begin()->parent;
    e->name = inode->names.begin()->name;
    e->new_parent = *dst;
    e->new_name = new_name;
    AppendLocked(std::move(e));
  }
  AddNameLocked(*dst, new_name, inode);
  inode->nlink++;
  inode->lookups++;
  {
    MutexLock ilock(inode->mu);
    inode->ctime = Now();
  }
  return AttrOf(*inode);
}

Result<OpenFile> Filesystem::Create(uint64_t parent, const std::string& name, uint32_t mode,
                                    int flags, const Caller& c) {
  if (parent == kRootIno && name == kReservedName) return Status::Error(EEXIST, name);
  if (parent == kControlDirIno) return Status::Error(EPERM, "the control directory is fixed");
  Status bad = CheckName(name);
  if (!bad.ok()) return bad;
  uint64_t existing_ino = 0;
  {
    NamespaceLock lock(ns_mu_);
    Result<InodeRef> dir = DirLocked(parent);
    if (!dir.ok()) return dir.status();
    Result<InodeRef> existing = ChildLocked(*dir, name);
    if (existing.ok()) {
      if (flags & O_EXCL) return Status::Error(EEXIST, name);
      (*existing)->lookups++;
      existing_ino = (*existing)->ino;
    } else if (existing.status().err() != ENOENT) {
      return existing.status();
    } else if ((*dir)->zarr && (*dir)->zarr->grid.Virtual(name)) {
      return Status::Error(EPERM, name + " is a chunk of a zarr array");
    } else {
      InodeRef inode = NewInodeLocked(FileType::kRegular, mode, c);
      AddNameLocked(*dir, name, inode);
      inode->lookups++;
      {
        MutexLock ilock(inode->mu);
        inode->version = 1;  // A new file is a change even when nothing is written to it.
      }
      auto h = std::make_unique<Handle>(inode, flags);
      h->wrote_version = 1;
      return OpenHandleLocked(std::move(h), /*may_bypass=*/true);
    }
  }
  Result<OpenFile> opened = Open(existing_ino, flags, c);
  if (!opened.ok()) Forget(existing_ino, 1);
  return opened;
}

Result<OpenFile> Filesystem::Open(uint64_t ino, int flags, const Caller& c) {
  if (ino == kStatsIno || ino == kSyncIno) {
    if (ino == kStatsIno && (flags & O_ACCMODE) != O_RDONLY) {
      return Status::Error(EACCES, "the stats file is read-only");
    }
    auto h = std::make_unique<Handle>();
    h->control_ino = ino;
    if (ino == kStatsIno) h->content = StatsJson();
    NamespaceLock lock(ns_mu_);
    h->sync_seq = journal_.last_seq();
    return OpenFile{ControlAttr(ino), AdoptHandleLocked(std::move(h)), true};
  }
  if (ino < kFirstIno && ino != kRootIno) return Status::Error(EISDIR, "control directory");
  if ((flags & O_ACCMODE) != O_RDONLY) WaitPassthroughReleased(ino);
  return Reserving([&](Reservation& reservation, size_t& more) {
    return OpenReserved(ino, flags, c, reservation, more);
  });
}

void Filesystem::WaitPassthroughReleased(uint64_t ino) {
  if (!open_backing_) return;  // Passthrough is off: no handle to wait for.
  NamespaceLock lock(ns_mu_);
  passthrough_released_.wait_for(lock, policy::kPassthroughReleaseWait, [&]() REQUIRES(ns_lock) {
    InodeRef inode = FindLocked(ino);
    return !inode || inode->passthrough_handles == 0;
  });
}

Result<OpenFile> Filesystem::OpenReserved(uint64_t ino, int flags, const Caller& c,
                                          Reservation& reservation, size_t& more) {
  NamespaceLock lock(ns_mu_);
  InodeRef inode = FindLocked(ino);
  if (!inode) return Status::Error(ENOENT, "no such inode");
  if (inode->type == FileType::kDirectory) return Status::Error(EISDIR, "open of a directory");
  if (inode->type == FileType::kSymlink) return Status::Error(ELOOP, "open of a symlink");
  if (inode->type != FileType::kRegular) {
    return Status::Error(ENXIO, "open of a special file (the kernel opens those itself)");
  }
  const bool truncate = (flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY;
  if (inode->passthrough_handles > 0 && (flags & O_ACCMODE) != O_RDONLY) {
    spdlog::warn("{}: refused to open for writing (ETXTBSY) while it is read through FUSE "
                 "passthrough; -o passthrough=off lets such writers in", PathLocked(inode));
    return Status::Error(ETXTBSY, "open for writing while read through FUSE passthrough");
  }
  std::shared_ptr<const ChunkView> view;
  bool served_zarray;
  {
    MutexLock ilock(inode->mu);
    view = inode->view;
    served_zarray = !inode->served_text.empty();
  }
  if (served_zarray) {
    // Rewritten by zarr with a rename; its reads bypass the page cache, which may hold the
    // text written before the array was served with a fine grid.
    if ((flags & O_ACCMODE) != O_RDONLY) return Status::Error(EACCES, "the .zarray of a fine grid");
    inode->open_handles++;
    return OpenFile{AttrOf(*inode), AdoptHandleLocked(std::make_unique<Handle>(inode, flags)), true};
  }
  if (view) {
    if (flags & O_APPEND) return Status::Error(EINVAL, "append to a zarr chunk");
    Status st = LoadOriginLocked(view->real);
    if (!st.ok()) return st;
    auto h = std::make_unique<Handle>(inode, flags);
    if (truncate) {
      st = ZarrFillView(*view, reservation, more);
      if (!st.ok() || more > 0) return st;
      MutexLock rlock(view->real->mu);
      h->wrote_version = view->real->version;
    }
    view->real->open_handles++;
    return OpenHandleLocked(std::move(h), /*may_bypass=*/false);
  }
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
        inode->mtime = inode->ctime = Now();
      }
      inode->origin_dir.reset();
      const uint32_t mode = ModeAfterChangeBy(inode->mode, c);
      mode_changed = mode != inode->mode;
      inode->mode = mode;
    }
    if (mode_changed) JournalAttrsLocked(inode, /*set_mode=*/true, false, false);
  } else {
    Status st = LoadOriginLocked(inode);
    if (!st.ok()) return st;
  }
  auto h = std::make_unique<Handle>(inode, flags);
  if (flags & O_TRUNC) {
    MutexLock ilock(inode->mu);
    h->wrote_version = inode->version;
  }
  return OpenHandleLocked(std::move(h), /*may_bypass=*/true);
}

OpenFile Filesystem::OpenHandleLocked(std::unique_ptr<Handle> h, bool may_bypass) {
  Inode* inode = h->inode.get();
  OpenFile out{AttrOf(*inode)};
  MutexLock ilock(inode->mu);
  const FileContent* c = &inode->content;
  const policy::OpenChoice choice = policy::ChooseOpen({
      .may_bypass = may_bypass,
      .access = h->flags & O_ACCMODE,
      .size = c->size(),
      .whole_on_backing = c->memory_blocks() == 0 && c->base() && !c->base()->spill() &&
                          c->base_len() == c->size(),
      .prefetched = inode->backing_prefetched,
      .passthrough_on = static_cast<bool>(open_backing_),
      .passthrough_readers = inode->passthrough_handles > 0,
      .open = inode->open_handles > 0,
      .cached_open = inode->cached_handles > 0,
      .direct_reads = direct_reads_,
  });
  if (choice.prefetch) {
    inode->backing_prefetched = true;
    env_->Advise(c->base()->fd(), 0, c->size());
  }
  if (choice.register_passthrough) inode->backing_id = open_backing_(c->base()->fd());
  // Only readers get here while passthrough handles are open (OpenReserved).
  h->passthrough = inode->backing_id >= 0;
  if (h->passthrough) {
    inode->passthrough_handles++;
    out.backing_id = inode->backing_id;
  } else {
    h->direct = choice.direct;
    if (!h->direct) {
      inode->cached_handles++;
      out.keep_cache = !inode->page_cache_stale;
      inode->page_cache_stale = false;
    }
    out.direct_io = h->direct;
  }
  inode->open_handles++;
  ilock.Unlock();
  out.handle = AdoptHandleLocked(std::move(h));
  return out;
}

Filesystem::ReadAhead Filesystem::ReadAheadLocked(Handle& h, uint64_t offset, size_t size) {
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
  Handle* h = HandleOf(handle);
  ReadData out;
  if (!h->inode) {
    if (h->control_ino == kSyncIno && h->content.empty()) {
      Status st = flusher_->WaitDurable(h->sync_seq);
      h->content = st.ok() ? "ok\n" : "error: " + st.ToString() + "\n";
    }
    if (offset < h->content.size()) out.owned = h->content.substr(offset, size);
    return out;
  }
  std::shared_ptr<const ChunkView> view;
  ReadAhead ahead;
  {
    MutexLock lock(h->inode->mu);
    view = h->inode->view;
    if (view) {
      // Read below, under the real chunk's lock.
    } else if (!h->inode->served_text.empty()) {
      const std::string* text = &h->inode->served_text;
      if (offset < text->size()) out.owned = text->substr(offset, size);
    } else {
      out.segments = h->inode->content.Read(offset, size);
      if (h->direct) ahead = ReadAheadLocked(*h, offset, size);
    }
  }
  if (ahead.file) {
    env_->Advise(ahead.file->fd(), ahead.offset, ahead.length);
  }
  if (view) {
    Result<ReadData> chunk = ZarrRead(*view, offset, size);
    if (!chunk.ok()) return chunk.status();
    out = std::move(*chunk);
  }
  stats_.bytes_read += out.owned.size();
  for (const ReadSegment& s : out.segments) stats_.bytes_read += s.length;
  return out;
}

Result<size_t> Filesystem::Write(uint64_t handle, uint64_t offset, const char* data,
                                 size_t size, const Caller& c) {
  Handle* h = HandleOf(handle);
  if (!h->inode) return ControlWrite(h->control_ino, std::string_view(data, size));
  // A virtual chunk writes into its range of the real chunk; bytes past the real chunk's end
  // are padding beyond the array's shape and are not stored.
  std::shared_ptr<const ChunkView> view;
  {
    MutexLock lock(h->inode->mu);
    view = h->inode->view;
    if (view) h->inode->mtime = h->inode->ctime = Now();
    // Reaches the backing store with the version this write makes, at its seal.
    h->inode->mode = ModeAfterChangeBy(h->inode->mode, c);
  }
  uint64_t target_offset = offset;
  size_t target_size = size;
  if (view) {
    const VirtualChunk& vc = view->chunk;
    if (offset + size > vc.length) return Status::Error(EFBIG, "past the end of a zarr chunk");
    target_offset = vc.offset + offset;
    target_size = offset >= vc.stored ? 0 : static_cast<size_t>(std::min<uint64_t>(size, vc.stored - offset));
  }
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
      break;
    }
    lock.unlock();
    reservation = arena_.Reserve(std::max(needed, WorstCaseBlocks(target_offset, target_size)));
    lock.lock();
  }
  inode->version++;
  inode->mtime = inode->ctime = Now();
  h->wrote_version = inode->version;
  stats_.bytes_written += size;
  if (h->direct) {
    if (inode->cached_handles == 0) {
      inode->page_cache_stale = true;
    } else {
      lock.unlock();
      if (invalidate_page_cache_) invalidate_page_cache_(h->inode->ino, offset, size);
    }
  }
  return size;
}

Status Filesystem::Flush(uint64_t handle) {
  Handle* h = HandleOf(handle);
  if (!h->inode) return Status::Ok();
  NamespaceLock lock(ns_mu_);
  SealHandleLocked(h);
  if ((h->flags & O_ACCMODE) == O_RDONLY) return Status::Ok();  // Readers are not told.
  MutexLock ilock(h->inode->mu);
  if (!h->inode->flush_error.ok() && !h->inode->flush_error_reported) {
    h->inode->flush_error_reported = true;
    return h->inode->flush_error;
  }
  return Status::Ok();
}

Status Filesystem::Release(uint64_t handle) {
  Handle* h = HandleOf(handle);
  NamespaceLock lock(ns_mu_);
  if (h->inode) {
    SealHandleLocked(h);
    if (h->passthrough) {
      if (--h->inode->passthrough_handles == 0) {
        close_backing_(h->inode->backing_id);
        h->inode->backing_id = -1;
        passthrough_released_.notify_all();
      }
    } else if (!h->direct) {
      MutexLock ilock(h->inode->mu);
      h->inode->cached_handles--;
    }
    if (InodeRef real = ContentOwner(h->inode); real != h->inode) CloseOneLocked(real);
    CloseOneLocked(h->inode);
    MaybeDropLocked(h->inode);
    --open_files_;
    last_open_or_release_ = clock_.Now();
  }
  handles_.erase(h);
  return Status::Ok();
}

void Filesystem::CloseOneLocked(const InodeRef& inode) {
  inode->open_handles--;
  // A file read from the backing store and left unchanged gives its descriptor back.
  MutexLock ilock(inode->mu);
  if (inode->content.memory_blocks() == 0) UnloadLocked(inode);
}

Status Filesystem::Fsync(uint64_t handle) {
  Handle* h = HandleOf(handle);
  if (!h->inode) return Status::Ok();
  uint64_t seq;
  {
    NamespaceLock lock(ns_mu_);
    SealLocked(h->inode);
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
  Handle* h = HandleOf(handle);
  if (!h->inode) return Status::Error(EBADF, "control file");
  if (mode != 0) return Status::Error(EOPNOTSUPP, "only plain fallocate is supported");
  MutexLock lock(h->inode->mu);
  if (h->inode->view) return Status::Error(EOPNOTSUPP, "fallocate of a zarr chunk");
  if (offset + length > h->inode->content.size()) {
    Reservation none;
    h->inode->content.Truncate(offset + length, none);
    h->inode->version++;
    h->wrote_version = h->inode->version;
    h->inode->mtime = h->inode->ctime = Now();
  }
  return Status::Ok();
}

Result<uint64_t> Filesystem::OpenDir(uint64_t ino) {
  auto* dh = new DirHandle;
  if (ino == kControlDirIno) {
    dh->entries = {{".", kControlDirIno, S_IFDIR}, {"..", kRootIno, S_IFDIR},
                   {"stats", kStatsIno, S_IFREG}, {"sync", kSyncIno, S_IFREG}};
    return reinterpret_cast<uint64_t>(dh);
  }
  NamespaceLock lock(ns_mu_);
  Result<InodeRef> dir = DirLocked(ino);
  if (!dir.ok()) {
    delete dh;
    return dir.status();
  }
  LoadDirLocked(*dir);
  uint64_t parent_ino = (*dir)->names.empty() ? kRootIno : (*dir)->names.begin()->parent->ino;
  dh->entries.push_back({".", ino, S_IFDIR});
  dh->entries.push_back({"..", parent_ino, S_IFDIR});
  for (const auto& [name, child] : (*dir)->children) {
    dh->entries.push_back({name, child->ino, child->TypeBits()});
  }
  return reinterpret_cast<uint64_t>(dh);
}

Result<std::vector<DirEntry>> Filesystem::ReadDir(uint64_t dir_handle, uint64_t offset) {
  auto* dh = reinterpret_cast<DirHandle*>(dir_handle);
  if (offset >= dh->entries.size()) return std::vector<DirEntry>{};
  return std::vector<DirEntry>(dh->entries.begin() + static_cast<ptrdiff_t>(offset),
                               dh->entries.end());
}

void Filesystem::ReleaseDir(uint64_t dir_handle) { delete reinterpret_cast<DirHandle*>(dir_handle); }

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

Status Filesystem::Sync() {
  uint64_t seq;
  {
    NamespaceLock lock(ns_mu_);
    seq = journal_.last_seq();
  }
  return flusher_->WaitDurable(seq);
}

Status Filesystem::Flushed(const FlushReport& report) {
  NamespaceLock lock(ns_mu_);
  for (const EntryRef& e : report.applied) e->inode->on_backing = true;
  for (const EntryRef& e : report.durable) {
    e->inode->on_backing = true;
    // Durable: no longer the inode's pending entry, though the journal completes it only after
    // this report (UnloadLocked would otherwise refuse a clean file in between).
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
    if (clean) clean_.push_back(e->inode);
  }
  if (!report.failed) return Status::Ok();
  const EntryRef& failed = report.failed;
  Status st = Status::Error(report.error.err(),
                            PathLocked(failed->inode) + ": " + report.error.message() +
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
