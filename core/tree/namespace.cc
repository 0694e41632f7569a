#include "core/tree/namespace.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <vector>

#include "core/backing/backing_paths.h"
#include "core/backing/backing_store.h"
#include "core/base/commit_markers.h"
#include "core/base/flush_policy.h"
#include "core/base/nanos.h"
#include "core/base/serve_policy.h"

namespace ckptfs {
namespace {

constexpr size_t kNameMax = 255;

// The mode bits, owner and times of a backing file.
void TakeAttributes(Inode& inode, const struct stat& st) REQUIRES(inode.mu) {
  inode.mode = st.st_mode & 07777;
  inode.uid = st.st_uid;
  inode.gid = st.st_gid;
  inode.atime = st.st_atim;
  inode.mtime = st.st_mtim;
  inode.ctime = st.st_ctim;
}

bool SameTime(const timespec& a, const timespec& b) {
  return a.tv_sec == b.tv_sec && a.tv_nsec == b.tv_nsec;
}

}  // namespace

Status CheckName(const std::string& name) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
    return Status::Error(EINVAL, "bad name");
  }
  if (name.size() > kNameMax) return Status::Error(ENAMETOOLONG, name);
  return Status::Ok();
}

bool PrivateName(uint64_t dir_ino, const std::string& name) {
  return (dir_ino == kRootIno && name == kReservedName) || name == kChecksumManifestName;
}

Status CheckNewName(uint64_t dir_ino, const std::string& name) {
  if (Status bad = CheckName(name); !bad.ok()) return bad;
  if (PrivateName(dir_ino, name)) return Status::Error(EPERM, name + ": a name ckptfs keeps");
  return Status::Ok();
}

bool ValidRelativePath(const std::string& path) {
  if (path.empty()) return false;
  size_t start = 0;
  while (true) {
    size_t slash = path.find('/', start);
    std::string name = path.substr(start, slash == std::string::npos ? std::string::npos
                                                                     : slash - start);
    if (!CheckName(name).ok()) return false;
    if (slash == std::string::npos) return true;
    start = slash + 1;
  }
}

timespec WallTime() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts;
}

void CopyAttributes(const Inode& inode, JournalEntry& e) {
  e.mode = inode.mode;
  e.uid = inode.uid;
  e.gid = inode.gid;
  e.atime = inode.atime;
  e.mtime = inode.mtime;
}

Status UnknownInode(uint64_t ino) {
  if (IsTensorViewIno(ino)) return Status::Error(EROFS, "a view of a checkpoint is read-only");
  return Status::Error(ESTALE, "inode " + std::to_string(ino) + " is not known here");
}

Namespace::Namespace(const Config& config, Env& env, Clock& clock, Stats& stats, Journal& journal,
                     int root_fd, std::function<void()> appended)
    : config_(config),
      env_(env),
      clock_(clock),
      stats_(stats),
      appended_(std::move(appended)),
      journal_(journal),
      next_ino_(kFirstIno + (uint64_t{config.worker} << kWorkerInoShift)) {
  auto root = std::make_shared<Inode>(kRootIno, FileType::kDirectory);
  struct stat st {};
  (void)env_.Stat(root_fd, "", &st);
  {
    MutexLock lock(root->mu);
    TakeAttributes(*root, st);
  }
  NamespaceLock lock(mu_);
  root->nlink = 2;
  root->on_backing = true;
  root->SetBackingDir(std::make_shared<BackingFile>(env_, dup(root_fd)));
  inodes_[kRootIno] = root;
}

Namespace::~Namespace() {
  NamespaceLock lock(mu_);
  // Inodes refer to each other (names, children, views): break the cycles.
  for (auto& [ino, inode] : inodes_) {
    inode->children.clear();
    inode->names.clear();
    inode->last_entry.reset();
    inode->zarr.reset();
    MutexLock ilock(inode->mu);
    inode->view.reset();
    inode->content_owner.reset();
  }
  inodes_.clear();
  aliases_.clear();
}

InodeRef Namespace::MakeInodeLocked(FileType type, uint64_t ino) {
  InodeRef inode = std::make_shared<Inode>(ino != 0 ? ino : next_ino_++, type);
  inodes_[inode->ino] = inode;
  return inode;
}

void Namespace::CancelUnsentLocked(const InodeRef& inode) {
  std::vector<EntryRef> rewritten;
  stats_.versions_skipped += journal_.CancelUnsent(inode, &rewritten);
  if (log_) {
    for (const EntryRef& e : rewritten) LogLocked(*e);
  }
}

InodeRef Namespace::FindLocked(uint64_t ino) const {
  if (auto it = inodes_.find(ino); it != inodes_.end()) return it->second;
  auto alias = aliases_.find(ino);
  return alias == aliases_.end() ? nullptr : alias->second;
}

Result<InodeRef> Namespace::DirLocked(uint64_t ino) const {
  InodeRef dir = FindLocked(ino);
  if (!dir) return UnknownInode(ino);
  if (dir->type != FileType::kDirectory) return Status::Error(ENOTDIR, "not a directory");
  return dir;
}

InodeRef Namespace::NewInodeLocked(FileType type, uint32_t mode, const Caller& c) {
  InodeRef inode = MakeInodeLocked(type);
  {
    MutexLock lock(inode->mu);
    inode->mode = mode & 07777;
    inode->uid = c.uid;
    inode->gid = c.gid;
    inode->atime = inode->mtime = inode->ctime = WallTime();
  }
  inode->nlink = type == FileType::kDirectory ? 2 : 1;
  return inode;
}

Result<InodeRef> Namespace::ChildLocked(const InodeRef& dir, const std::string& name) {
  if (Status bad = CheckName(name); !bad.ok()) return bad;
  if (auto it = dir->children.find(name); it != dir->children.end()) return it->second;
  if ((dir->complete && !FollowsBackingLocked(dir)) || !dir->BackingDir() ||
      HiddenLocked(dir, name) || PrivateName(dir->ino, name)) {
    return Status::Error(ENOENT, name);
  }
  Result<InodeRef> inode = BackingInodeLocked(dir, name);
  if (!inode.ok()) return inode;
  AddFoundLocked(dir, name, *inode);
  return inode;
}

void Namespace::AddFoundLocked(const InodeRef& dir, const std::string& name,
                               const InodeRef& child) {
  dir->children[name] = child;
  child->names.insert({dir, name});
  if (child->type == FileType::kDirectory && directory_kind_) directory_kind_->FoundLocked(child);
}

Result<InodeRef> Namespace::LookupLocked(const InodeRef& dir, const std::string& name) {
  Result<InodeRef> child = ChildLocked(dir, name);
  if (!child.ok() || RefreshFileLocked(*child)) return child;
  ForgetNameLocked(dir, name, *child);
  return ChildLocked(dir, name);
}

bool Namespace::RefreshFileLocked(const InodeRef& inode) {
  if (!config_.shared || !inode->origin_dir ||
      clock_.Now() - inode->backing_read_at < kAttrTimeout || PendingLocked(inode)) {
    return true;
  }
  {
    MutexLock lock(inode->mu);
    if (!inode->served_text.empty()) return true;  // A fine grid's .zarray: served as found.
  }
  struct stat st {};
  if (Status found = env_.Stat(inode->origin_dir->fd(), inode->origin_name, &st); !found.ok()) {
    return found.err() != ENOENT;
  }
  if (!S_ISREG(st.st_mode)) return false;
  FollowBackingFileLocked(inode, st);
  MutexLock lock(inode->mu);
  inode->content = FileContent(nullptr, static_cast<uint64_t>(st.st_size));
  return true;
}

void Namespace::FollowBackingFileLocked(const InodeRef& inode, const struct stat& st) {
  inode->backing_read_at = clock_.Now();
  MutexLock lock(inode->mu);
  if (inode->content.size() != static_cast<uint64_t>(st.st_size) ||
      !SameTime(inode->mtime, st.st_mtim) || !SameTime(inode->ctime, st.st_ctim)) {
    inode->page_cache_stale = true;
  }
  TakeAttributes(*inode, st);
}

void Namespace::RememberBackingLinkLocked(std::pair<uint64_t, uint64_t> backing_id,
                                          const InodeRef& inode) {
  if (backing_links_.size() >= backing_links_sweep_at_) {
    std::erase_if(backing_links_, [](const auto& link) { return link.second.expired(); });
    backing_links_sweep_at_ = std::max(kBackingLinksSwept, 2 * backing_links_.size());
  }
  backing_links_[backing_id] = inode;
}

Result<InodeRef> Namespace::BackingInodeLocked(const InodeRef& dir, const std::string& name,
                                               uint64_t ino) {
  int dfd = dir->BackingDir()->fd();
  struct stat st {};
  if (Status found = env_.Stat(dfd, name, &st); !found.ok()) return found;
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
  auto inode = std::make_shared<Inode>(ino != 0 ? ino : next_ino_++, type);
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
  inode->backing_read_at = clock_.Now();
  if (linkable && st.st_nlink > 1) RememberBackingLinkLocked(backing_id, inode);
  if (type == FileType::kDirectory) {
    Result<int> fd = env_.Open(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (!fd.ok()) return fd.status();
    inode->SetBackingDir(std::make_shared<BackingFile>(env_, *fd));
  } else if (type == FileType::kRegular) {
    inode->origin_dir = dir->BackingDir();
    inode->origin_name = name;
  } else if (type == FileType::kSymlink) {
    Result<std::string> target = env_.ReadLink(dfd, name);
    if (!target.ok()) return target.status();
    inode->symlink_target = std::move(*target);
  }
  inodes_[inode->ino] = inode;
  return inode;
}

Status Namespace::CheckAbsentLocked(const InodeRef& dir, const std::string& name) {
  Result<InodeRef> existing = ChildLocked(dir, name);
  if (existing.ok()) return Status::Error(EEXIST, name);
  if (existing.status().err() != ENOENT) return existing.status();
  return directory_kind_ ? directory_kind_->MayCreateLocked(dir, name) : Status::Ok();
}

void Namespace::LoadDirLocked(const InodeRef& dir) {
  if (dir->complete &&
      (!FollowsBackingLocked(dir) || clock_.Now() - dir->backing_read_at < kAttrTimeout)) {
    return;
  }
  std::shared_ptr<BackingFile> backing = dir->BackingDir();
  if (!backing) {
    dir->complete = true;
    return;
  }
  Result<std::vector<std::string>> listed = env_.ListDir(backing->fd());
  if (!listed.ok()) return;
  if (FollowsBackingLocked(dir)) ForgetVanishedLocked(dir, *listed);
  // Chosen before any is added: a fine grid's virtual chunks may share names with real ones.
  std::erase_if(*listed, [&](const std::string& name) REQUIRES(ns_lock) {
    return PrivateName(dir->ino, name) || dir->children.count(name) ||
           HiddenLocked(dir, name);
  });
  for (const std::string& name : *listed) {
    if (directory_kind_ && directory_kind_->TakeBackingEntryLocked(dir, name)) continue;
    Result<InodeRef> child = ChildLocked(dir, name);
    (void)child;  // Entries that vanished or are special files are simply not listed.
  }
  dir->complete = true;
  dir->backing_read_at = clock_.Now();
  if (config_.shared) {
    const uint64_t durable = journal_.settled_seq();
    dir->whiteouts.erase_if([&](const auto& whiteout) { return whiteout.second <= durable; });
  } else {
    dir->whiteouts.clear();
  }
}

bool Namespace::FollowsBackingLocked(const InodeRef& dir) const {
  return config_.shared && !dir->zarr;
}

bool Namespace::HiddenLocked(const InodeRef& dir, const std::string& name) {
  auto it = dir->whiteouts.find(name);
  if (it == dir->whiteouts.end()) return false;
  if (!config_.shared || it->second > journal_.settled_seq()) return true;
  dir->whiteouts.erase(it);
  return false;
}

void Namespace::ForgetVanishedLocked(const InodeRef& dir, const std::vector<std::string>& listed) {
  const std::set<std::string> present(listed.begin(), listed.end());
  std::vector<std::pair<std::string, InodeRef>> vanished;
  for (const auto& [name, child] : dir->children) {
    if (!present.count(name) && BackingOnlyLocked(child)) vanished.emplace_back(name, child);
  }
  for (const auto& [name, child] : vanished) ForgetNameLocked(dir, name, child);
}

void Namespace::ForgetNameLocked(const InodeRef& dir, const std::string& name,
                                 const InodeRef& inode) {
  dir->children.erase(name);
  inode->names.erase({dir, name});
  if (inode->type == FileType::kDirectory) {
    const auto children = inode->children;
    for (const auto& [child_name, child] : children) ForgetNameLocked(inode, child_name, child);
    inode->nlink = 0;
  } else {
    inode->nlink = inode->names.empty() ? 0 : inode->nlink - 1;
  }
  MaybeDropLocked(inode);
}

void Namespace::ForgetBackingNameLocked(const InodeRef& dir, const std::string& name) {
  auto it = dir->children.find(name);
  if (it == dir->children.end() || !BackingOnlyLocked(it->second)) return;
  const InodeRef child = it->second;
  ForgetNameLocked(dir, name, child);
}

Status Namespace::LoadOriginLocked(const InodeRef& inode) {
  if (!inode->origin_dir) return Status::Ok();
  Result<int> fd = env_.Open(inode->origin_dir->fd(), inode->origin_name, O_RDONLY | O_NOFOLLOW);
  if (!fd.ok()) {
    return Status::Error(fd.status().err(), "open backing file " + inode->origin_name);
  }
  auto file = std::make_shared<BackingFile>(env_, *fd);
  struct stat st {};
  Status stated = env_.Stat(*fd, "", &st);
  if (stated.ok() && config_.shared && !PendingLocked(inode)) FollowBackingFileLocked(inode, st);
  {
    MutexLock lock(inode->mu);
    inode->content = FileContent(std::move(file), static_cast<uint64_t>(st.st_size));
  }
  inode->origin_dir.reset();
  inode->origin_name.clear();
  return Status::Ok();
}

Result<EntryRef> Namespace::AddNewLocked(uint64_t parent, const std::string& name,
                                           FileType type, uint32_t mode, const Caller& c,
                                           JournalEntry::Kind kind) {
  if (parent == kRootIno && name == kReservedName) return Status::Error(EEXIST, name);
  Status bad = CheckNewName(parent, name);
  if (!bad.ok()) return bad;
  Result<InodeRef> dir = DirLocked(parent);
  if (!dir.ok()) return dir.status();
  if (Status absent = CheckAbsentLocked(*dir, name); !absent.ok()) return absent;
  std::shared_ptr<BackingFile> made;
  if (config_.shared && type == FileType::kDirectory) {
    Result<std::shared_ptr<BackingFile>> backing = MakeBackingDirLocked(*dir, name, mode, c);
    if (!backing.ok()) return backing.status();
    made = std::move(*backing);
  }
  InodeRef inode = NewInodeLocked(type, mode, c);
  if (made) {
    inode->SetBackingDir(std::move(made));
    inode->on_backing = true;
  }
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

Result<std::shared_ptr<BackingFile>> Namespace::MakeBackingDirLocked(const InodeRef& dir,
                                                                     const std::string& name,
                                                                     uint32_t mode,
                                                                     const Caller& c) {
  std::shared_ptr<BackingFile> parent = dir->BackingDir();
  if (!parent || HiddenLocked(dir, name)) return std::shared_ptr<BackingFile>();
  const int dfd = parent->fd();
  if (Status made = env_.Mkdir(dfd, name, mode & 07777); !made.ok()) {
    return Status::Error(made.err(), "mkdir " + name + " on the backing store");
  }
  Result<int> fd = env_.Open(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
  Status st = fd.ok() ? env_.Chmod(*fd, "", mode & 07777) : fd.status();
  if (st.ok() && geteuid() == 0) st = env_.Chown(*fd, "", c.uid, c.gid);
  if (!st.ok()) {
    if (fd.ok()) env_.Close(*fd);
    (void)env_.Unlink(dfd, name, /*directory=*/true);
    return Status::Error(st.err(), "set up directory " + name + " on the backing store");
  }
  return std::make_shared<BackingFile>(env_, *fd);
}

void Namespace::AddNameLocked(const InodeRef& dir, const std::string& name,
                               const InodeRef& inode) {
  dir->children[name] = inode;
  // In shared mode a whiteout outlives a new child of its name (which hides it meanwhile): the
  // backing store may hold the old entry until the removal is durable.
  if (!config_.shared) dir->whiteouts.erase(name);
  inode->names.insert({dir, name});
  MutexLock lock(dir->mu);
  dir->mtime = dir->ctime = WallTime();
}

void Namespace::RemoveNameLocked(const InodeRef& dir, const std::string& name,
                                  const InodeRef& inode, bool journal) {
  if (journal) JournalRemovalLocked(dir, name, inode);
  dir->children.erase(name);
  // The backing store may still hold this name until the journal says otherwise: in shared mode
  // until the journal is durable through the removal of an inode that may be there (journaled
  // above, or by the caller's rename), else until the directory is listed.
  if (config_.shared) {
    if (JournaledLocked(inode)) dir->whiteouts[name] = journal_.last_seq();
  } else if (!dir->complete) {
    dir->whiteouts[name] = 0;
  }
  inode->names.erase({dir, name});
  MutexLock lock(dir->mu);
  dir->mtime = dir->ctime = WallTime();
}

Status Namespace::RenameLocked(const InodeRef& src, const std::string& name,
                               const InodeRef& child, const InodeRef& dst,
                               const std::string& new_name, const InodeRef& victim) {
  if (child->type == FileType::kDirectory) {
    for (const Inode* cur = dst.get(); cur && cur->ino != kRootIno;
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
    e->parent = src;
    e->name = name;
    e->new_parent = dst;
    e->new_name = new_name;
    e->victim = victim;
    if (config_.shared) {
      MutexLock ilock(child->mu);
      e->sent_as_marker = policy::RenameSentAsMarker(
          config_.replicas, child->type == FileType::kRegular,
          policy::IsCommitMarker(new_name, config_.commit_markers),
          child->version != child->sealed_version);
      if (e->sent_as_marker) {
        e->snapshot = child->content;
        e->version = child->version;
        e->mode = child->mode;
      }
    }
    AppendLocked(std::move(e));
  }
  const timespec now = WallTime();
  RemoveNameLocked(src, name, child, /*journal=*/false);
  if (victim) {
    // Unless the rename itself replaces it on the backing store, the old file must go there now:
    // the new one reaches the backing store only at its seal.
    RemoveNameLocked(dst, new_name, victim, /*journal=*/!JournaledLocked(child));
    victim->nlink = victim->type == FileType::kDirectory ? 0 : victim->nlink - 1;
    if (victim->type == FileType::kDirectory) dst->nlink--;
    MutexLock ilock(victim->mu);
    victim->ctime = now;  // It lost a link, as its other names show.
  }
  AddNameLocked(dst, new_name, child);
  if (child->type == FileType::kDirectory && src != dst) {
    src->nlink--;
    dst->nlink++;
  }
  {
    MutexLock ilock(child->mu);
    child->ctime = now;
  }
  if (victim && victim->nlink == 0) {
    CancelUnsentLocked(victim);
    MaybeDropLocked(victim);
  }
  return Status::Ok();
}

Status Namespace::LinkLocked(const InodeRef& inode, uint64_t new_parent,
                             const std::string& new_name) {
  if (inode->type == FileType::kDirectory) return Status::Error(EPERM, "hard link of a directory");
  Result<InodeRef> dst = DirLocked(new_parent);
  if (!dst.ok()) return dst.status();
  if (Status absent = CheckAbsentLocked(*dst, new_name); !absent.ok()) return absent;
  if (inode->names.empty()) return Status::Error(ENOENT, "link of a deleted file");
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
  {
    MutexLock ilock(inode->mu);
    inode->ctime = WallTime();
  }
  return Status::Ok();
}

Result<InodeRef> Namespace::MkdirLocked(uint64_t parent, const std::string& name, uint32_t mode,
                                        const Caller& c) {
  Result<EntryRef> e = AddNewLocked(parent, name, FileType::kDirectory, mode, c,
                                    JournalEntry::Kind::kMkdir);
  if (!e.ok()) return e.status();
  InodeRef inode = (*e)->inode;
  inode->complete = true;
  (*e)->parent->nlink++;
  AppendLocked(std::move(*e));
  return inode;
}

Result<InodeRef> Namespace::SymlinkLocked(uint64_t parent, const std::string& name,
                                          const std::string& target, const Caller& c) {
  Result<EntryRef> e =
      AddNewLocked(parent, name, FileType::kSymlink, 0777, c, JournalEntry::Kind::kSymlink);
  if (!e.ok()) return e.status();
  InodeRef inode = (*e)->inode;
  inode->symlink_target = target;
  (*e)->symlink_target = target;
  AppendLocked(std::move(*e));
  return inode;
}

Result<InodeRef> Namespace::MknodLocked(uint64_t parent, const std::string& name, uint32_t mode,
                                        uint64_t rdev, const Caller& c) {
  const uint32_t type = mode & S_IFMT;
  Result<EntryRef> e =
      AddNewLocked(parent, name, FileType::kSpecial, mode, c, JournalEntry::Kind::kMknod);
  if (!e.ok()) return e.status();
  InodeRef inode = (*e)->inode;
  inode->special_type = type;
  inode->rdev = type == S_IFCHR || type == S_IFBLK ? rdev : 0;
  (*e)->node_type = type;
  (*e)->rdev = inode->rdev;
  AppendLocked(std::move(*e));
  return inode;
}

Status Namespace::UnlinkLocked(const InodeRef& dir, const std::string& name,
                               const InodeRef& inode) {
  if (inode->nlink > 1 || inode->open_handles > 0 || inode->lookups > 0) {
    Status st = LoadOriginLocked(inode);
    if (!st.ok()) return st;
  }
  RemoveNameLocked(dir, name, inode);
  inode->nlink--;
  {
    MutexLock ilock(inode->mu);
    inode->ctime = WallTime();
  }
  if (inode->nlink == 0) {
    CancelUnsentLocked(inode);
    MaybeDropLocked(inode);
  }
  return Status::Ok();
}

void Namespace::RmdirLocked(const InodeRef& dir, const std::string& name, const InodeRef& inode) {
  RemoveNameLocked(dir, name, inode);
  inode->nlink = 0;
  dir->nlink--;
  CancelUnsentLocked(inode);
  MaybeDropLocked(inode);
}

std::vector<DirEntry> Namespace::ListLocked(const InodeRef& dir, uint64_t ino) {
  LoadDirLocked(dir);
  uint64_t parent_ino = dir->names.empty() ? kRootIno : dir->names.begin()->parent->ino;
  std::vector<DirEntry> entries;
  entries.push_back({".", ino, S_IFDIR});
  entries.push_back({"..", parent_ino, S_IFDIR});
  for (const auto& [name, child] : dir->children) {
    entries.push_back({name, child->ino, child->TypeBits()});
  }
  return entries;
}

std::string Namespace::PathLocked(const InodeRef& inode) const {
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

Attr Namespace::AttrOf(const Inode& inode) const {
  Attr a;
  a.ino = inode.ino;
  a.nlink = inode.nlink;
  const bool maybe_zarr = inode.type == FileType::kRegular && MayBeInZarrArrayLocked(inode);
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
      a.settled = policy::AttrSettled({
          .shared = config_.shared,
          .regular = true,
          .zarr = inode.view || !inode.served_text.empty() || maybe_zarr,
          .durable = inode.durable_version == inode.version,
      });
      break;
    case FileType::kSymlink: a.size = inode.symlink_target.size(); break;
    case FileType::kDirectory: a.size = 4096; break;
    case FileType::kSpecial: a.rdev = inode.rdev; break;
  }
  return a;
}

bool Namespace::MayBeInZarrArrayLocked(const Inode& inode) const {
  for (const Inode::Name& n : inode.names) {
    const bool chunk_key = n.name.find_first_not_of("0123456789.") == std::string::npos;
    if (chunk_key || n.name == ".zarray" || n.parent->zarr) return true;
  }
  return false;
}

InodeRef Namespace::ContentOwner(const InodeRef& inode) {
  MutexLock lock(inode->mu);
  return inode->content_owner ? inode->content_owner : inode;
}

void Namespace::MaybeDropLocked(const InodeRef& inode) {
  if (inode->nlink > 0 || inode->open_handles > 0) return;
  // Deleted and closed: its data is unreachable now, even while the kernel still knows the inode.
  if (inode->type == FileType::kRegular) {
    MutexLock ilock(inode->mu);
    inode->content = FileContent();
  }
  inode->origin_dir.reset();
  if (inode->lookups == 0) inodes_.erase(inode->ino);
}

bool Namespace::JournaledLocked(const InodeRef& inode) const {
  {
    MutexLock lock(inode->mu);
    if (inode->content_owner) return false;  // Virtual chunks never reach the backing store.
  }
  return inode->on_backing || PendingLocked(inode);
}

bool Namespace::BackingOnlyLocked(const InodeRef& inode) const {
  if (!inode->on_backing || inode->open_handles > 0 || PendingLocked(inode)) return false;
  if (inode->type == FileType::kRegular) {
    MutexLock lock(inode->mu);
    return !inode->content_owner && inode->served_text.empty() &&
           inode->durable_version == inode->version;
  }
  if (inode->type != FileType::kDirectory) return true;
  if (inode->zarr) return false;
  const uint64_t durable = journal_.settled_seq();
  for (const auto& [name, seq] : inode->whiteouts) {
    if (seq > durable) return false;
  }
  for (const auto& [name, child] : inode->children) {
    if (!BackingOnlyLocked(child)) return false;
  }
  return true;
}

bool Namespace::PendingLocked(const InodeRef& inode) const {
  EntryRef last = inode->last_entry.lock();
  return last && journal_.Pending(last);
}

uint64_t Namespace::AppendLocked(EntryRef entry) {
  entry->sealed_at = clock_.Now();
  // An unlink or rmdir is about its victim, though it names the directory as its inode: the
  // removal may be cancelled with the victim, and must not then leave the directory looking as
  // if its own pending entries (a mkdir) were done.
  if (entry->kind != JournalEntry::Kind::kUnlink && entry->kind != JournalEntry::Kind::kRmdir) {
    entry->inode->last_entry = entry;
  }
  const JournalEntry& appended = *entry;
  uint64_t seq = journal_.Append(std::move(entry));
  if (log_) LogLocked(appended);
  appended_();
  return seq;
}

bool Namespace::ChildPathLocked(const Inode& dir, const std::string& name,
                                std::string* path) const {
  std::string out = name;
  for (const Inode* cur = &dir; cur->ino != kRootIno; cur = cur->names.begin()->parent.get()) {
    if (cur->names.empty()) return false;
    out = cur->names.begin()->name + "/" + out;
  }
  *path = std::move(out);
  return true;
}

void Namespace::LogLocked(const JournalEntry& e) {
  LoggedEntry l;
  l.kind = e.kind;
  l.seq = e.seq;
  if (e.kind == JournalEntry::Kind::kPublish) {
    for (const Inode::Name& n : e.names) {
      std::string path;
      if (ChildPathLocked(*n.parent, n.name, &path)) l.names.push_back(std::move(path));
    }
    if (l.names.empty()) return;
    l.size = e.snapshot.size();
    l.in_memory = !e.snapshot.base();
    if (!l.in_memory) {
      l.spill_file = e.snapshot.base()->name();
      l.base_len = e.snapshot.base_len();
    }
    if (l.in_memory || !l.spill_file.empty()) {
      for (const auto& [index, block] : e.snapshot.blocks()) {
        l.blocks.emplace_back(index, block.slot());
      }
    }
  } else {
    if (!e.parent || !ChildPathLocked(*e.parent, e.name, &l.path)) return;
    if (e.new_parent && !ChildPathLocked(*e.new_parent, e.new_name, &l.new_path)) return;
  }
  l.rename_flags = e.rename_flags;
  l.mode = e.mode;
  l.uid = e.uid;
  l.gid = e.gid;
  l.atime_ns = NanosOf(e.atime);
  l.mtime_ns = NanosOf(e.mtime);
  l.set_mode = e.set_mode;
  l.set_owner = e.set_owner;
  l.set_times = e.set_times;
  l.symlink_target = e.symlink_target;
  l.node_type = e.node_type;
  l.rdev = e.rdev;
  log_->Append(l);
}

void Namespace::JournalRemovalLocked(const InodeRef& dir, const std::string& name,
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

void Namespace::JournalAttrsLocked(const InodeRef& inode, bool set_mode, bool set_owner,
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

uint64_t Namespace::SealLocked(const InodeRef& inode) {
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
}  // namespace ckptfs
