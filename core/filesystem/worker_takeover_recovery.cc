// WorkerTakeover::RecoverCrashedWorker and RecoverEarlierMount: a worker that took over after a
// crash replays what the recovery log holds pending (core/recovery/recovery_log.h) through the
// operations a client would have made, so that its journal publishes them in the same order.
#include <fcntl.h>
#include <spdlog/spdlog.h>

#include <unordered_map>

#include "core/backing/backing_store.h"
#include "core/base/commit_markers.h"
#include "core/base/nanos.h"
#include "core/filesystem/filesystem.h"
#include "core/filesystem/worker_takeover.h"
#include "core/replication/replication_policy.h"
#include "core/replication/stand_in_record.h"

namespace ckptfs {
namespace {

// The error of a recovery whose log had dropped records (it replays those before them).
Status LogWasFull() {
  return Status::Error(EIO,
                       "the recovery log was full: the changes after those replayed are lost");
}

// A change the backing store shows already (applied before the crash, not yet known durable).
bool AlreadyThere(const Status& st) { return st.err() == EEXIST || st.err() == ENOENT; }

}  // namespace

WorkerTakeover::WorkerTakeover(Filesystem& fs, const Parts& parts)
    : fs_(fs),
      config_(parts.config),
      env_(&parts.env),
      root_fd_(parts.root_fd),
      staging_fd_(parts.staging_fd),
      stats_(parts.stats),
      arena_(parts.arena),
      log_(parts.log),
      journal_(parts.journal),
      ns_(parts.ns),
      handles_(parts.handles),
      kernel_state_(parts.kernel_state),
      specials_(parts.specials),
      flusher_(&parts.flusher),
      replication_run_(parts.replication_run) {}

Result<InodeRef> WorkerTakeover::ResolveLocked(const std::string& path) {
  InodeRef at = ns_.FindLocked(kRootIno);
  size_t start = 0;
  while (true) {
    if (at->type != FileType::kDirectory) return Status::Error(ENOTDIR, path);
    const size_t slash = path.find('/', start);
    Result<InodeRef> child = ns_.ChildLocked(
        at, path.substr(start, slash == std::string::npos ? std::string::npos : slash - start));
    if (!child.ok()) return child.status();
    at = *child;
    if (slash == std::string::npos) return at;
    start = slash + 1;
  }
}

Result<WorkerTakeover::PathParent> WorkerTakeover::ParentOfLocked(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return PathParent{kRootIno, path};
  Result<InodeRef> dir = ResolveLocked(path.substr(0, slash));
  if (!dir.ok()) return dir.status();
  if ((*dir)->type != FileType::kDirectory) return Status::Error(ENOTDIR, path);
  return PathParent{(*dir)->ino, path.substr(slash + 1)};
}

Result<WorkerTakeover::PathParent> WorkerTakeover::ParentOf(const std::string& path) {
  NamespaceLock lock(ns_.mutex());
  return ParentOfLocked(path);
}

Result<uint64_t> WorkerTakeover::InodeAt(const std::string& path) {
  NamespaceLock lock(ns_.mutex());
  Result<InodeRef> found = ResolveLocked(path);
  if (!found.ok()) return found.status();
  return (*found)->ino;
}

Status WorkerTakeover::ReplayPublish(const LoggedEntry& e, Adopted& adopted) {
  std::shared_ptr<BackingFile> spill;
  if (!e.in_memory) {
    if (e.spill_file.empty()) {
      return Status::Error(EIO, "part of it was in a file the log cannot name");
    }
    Result<std::shared_ptr<BackingFile>> file = AdoptSpillFile(e.spill_file, adopted);
    if (!file.ok()) return file.status();
    spill = *file;
  }
  const Caller owner{e.uid, e.gid, 0};
  Result<PathParent> at = ParentOf(e.names[0]);
  if (!at.ok()) return at.status();
  Result<uint64_t> existing = InodeAt(e.names[0]);
  Result<OpenFile> opened =
      existing.ok() ? fs_.Open(*existing, O_WRONLY, owner)
                    : fs_.Create(at->dir, at->name, e.mode, O_WRONLY | O_CREAT | O_EXCL, owner);
  if (!opened.ok()) return opened.status();
  if (!existing.ok()) fs_.Forget(opened->attr.ino, 1);
  std::vector<std::pair<uint64_t, BlockRef>> content;
  for (const auto& [index, slot] : e.blocks) content.emplace_back(index, adopted.blocks[slot]);
  {
    NamespaceLock lock(ns_.mutex());
    FileHandle* h = handles_.Find(opened->handle)->file();
    const InodeRef inode = h->inode;
    MutexLock ilock(inode->mu);
    inode->content = FileContent(e.size, std::move(content), std::move(spill), e.base_len);
    inode->version++;
    h->wrote_version = inode->version;
    inode->mode = e.mode;
    inode->uid = e.uid;
    inode->gid = e.gid;
    inode->atime = TimespecOf(e.atime_ns);
    inode->mtime = TimespecOf(e.mtime_ns);
  }
  const uint64_t ino = opened->attr.ino;
  Status closed = fs_.Release(opened->handle);  // Seals the version.
  if (closed.ok()) adopted.replayed.insert(ino);
  for (size_t i = 1; i < e.names.size() && closed.ok(); ++i) {
    Result<PathParent> link_at = ParentOf(e.names[i]);
    if (!link_at.ok()) return link_at.status();
    Result<Attr> linked = fs_.Link(ino, link_at->dir, link_at->name);
    if (linked.ok()) fs_.Forget(ino, 1);
  }
  return closed;
}

Status WorkerTakeover::ReplayEntry(const LoggedEntry& e, Adopted& adopted) {
  using Kind = JournalEntry::Kind;
  if (e.kind == Kind::kPublish) return ReplayPublish(e, adopted);
  const Caller owner{e.uid, e.gid, 0};
  Result<PathParent> at = ParentOf(e.path);
  if (!at.ok()) return at.status();
  // An entry made by an operation the kernel got an answer for: its node is forgotten again.
  auto made = [&](const Result<Attr>& attr) {
    if (attr.ok()) fs_.Forget(attr->ino, 1);
    return attr.status();
  };
  switch (e.kind) {
    case Kind::kMkdir: return made(fs_.Mkdir(at->dir, at->name, e.mode, owner));
    case Kind::kSymlink: return made(fs_.Symlink(at->dir, at->name, e.symlink_target, owner));
    case Kind::kMknod:
      return made(fs_.Mknod(at->dir, at->name, e.node_type | e.mode, e.rdev, owner));
    case Kind::kUnlink: return fs_.Unlink(at->dir, at->name);
    case Kind::kRmdir: return fs_.Rmdir(at->dir, at->name);
    case Kind::kRename: {
      Result<PathParent> to = ParentOf(e.new_path);
      if (!to.ok()) return to.status();
      return fs_.Rename(at->dir, at->name, to->dir, to->name, e.rename_flags);
    }
    case Kind::kLink: {
      Result<uint64_t> ino = InodeAt(e.path);
      Result<PathParent> to = ParentOf(e.new_path);
      if (!ino.ok()) return ino.status();
      if (!to.ok()) return to.status();
      return made(fs_.Link(*ino, to->dir, to->name));
    }
    case Kind::kSetAttr: {
      Result<uint64_t> ino = InodeAt(e.path);
      if (!ino.ok()) return ino.status();
      SetAttrRequest r;
      if (e.set_mode) r.mode = e.mode;
      if (e.set_owner) {
        r.uid = e.uid;
        r.gid = e.gid;
      }
      if (e.set_times) {
        r.atime = TimespecOf(e.atime_ns);
        r.mtime = TimespecOf(e.mtime_ns);
      }
      return fs_.SetAttr(*ino, r).status();
    }
    case Kind::kPublish: break;
  }
  return Status::Ok();
}

Status WorkerTakeover::Recover(Predecessor predecessor) {
  if (!log_) {
    RemoveSpillFiles(*env_, staging_fd_);
    return Status::Ok();
  }
  Result<LoggedState> state = log_->Pending();
  if (!state.ok()) {
    spdlog::error("recovery: {}", state.status().ToString());
    log_->Reset();
    state = LoggedState{};
  }
  KernelStateRecord* const record = kernel_state_.record();
  const KernelStateRecord::State kernel = record ? record->Read() : KernelStateRecord::State{};
  // Every block named, adopted at once (sealed versions and open files share blocks).
  Adopted adopted;
  std::vector<uint64_t> slots;
  for (const LoggedEntry& e : state->entries) {
    for (const auto& [index, slot] : e.blocks) {
      if (adopted.blocks.emplace(slot, BlockRef()).second) slots.push_back(slot);
    }
  }
  for (const KernelStateRecord::Node& n : kernel.nodes) {
    for (const auto& [index, slot] : n.blocks) {
      if (adopted.blocks.emplace(slot, BlockRef()).second) slots.push_back(slot);
    }
  }
  Result<std::vector<BlockRef>> blocks = arena_.Adopt(slots);
  if (!blocks.ok()) {
    spdlog::error("recovery: the cache's blocks cannot be taken over ({}): what the previous "
                  "worker had not made durable is lost", blocks.status().ToString());
    log_->Reset();
    if (record) record->Clear();
    RemoveSpillFiles(*env_, staging_fd_);
    return blocks.status();
  }
  for (size_t i = 0; i < slots.size(); ++i) adopted.blocks[slots[i]] = std::move((*blocks)[i]);
  if (record && predecessor == Predecessor::kEarlierMount) {
    // Before the replay, which a failure here leaves to a later try.
    if (Status rescued = RescueOpenFiles(kernel, adopted); !rescued.ok()) return rescued;
  }
  // Not recorded while replaying: a worker that dies meanwhile leaves the record as it was.
  Status replayed = kernel_state_.Unrecorded([&] { return Replay(*state, adopted); });
  if (record && predecessor == Predecessor::kCrashedWorker) RecoverKernelState(kernel, adopted);
  // Spill files nothing names any more go (those taken over go with their last reference).
  RemoveSpillFiles(*env_, staging_fd_,
                   [&](const std::string& name) { return adopted.spills.count(name) > 0; });
  return replayed;
}

Result<std::shared_ptr<BackingFile>> WorkerTakeover::AdoptSpillFile(const std::string& name,
                                                                Adopted& adopted) {
  if (auto it = adopted.spills.find(name); it != adopted.spills.end()) return it->second;
  Result<int> fd = env_->Open(staging_fd_, name, O_RDWR | O_NOFOLLOW);
  if (!fd.ok()) return fd.status();
  auto file = std::make_shared<BackingFile>(*env_, *fd, staging_fd_, name);
  adopted.spills.emplace(name, file);
  return file;
}

Status WorkerTakeover::ForgetOtherRuns(Status recovered) {
  if (!recovered.ok() || !config_.shared) return recovered;
  if (Status removed = replication::RemoveStandInRecordsOfOtherRuns(*env_, root_fd_, config_.node,
                                                                    replication_run_);
      !removed.ok()) {
    spdlog::warn("recovery: the records of what partners made durable for earlier runs of node "
                 "{} cannot all be removed: {}", config_.node, removed.ToString());
  }
  return recovered;
}

Status WorkerTakeover::Replay(const LoggedState& state, Adopted& adopted) {
  if (state.entries.empty()) {
    log_->Reset();
    return state.dropped ? LogWasFull() : Status::Ok();
  }
  // -o replicas: the versions a partner made durable for this node's run while it was dead are
  // not published again (core/replication/stand_in_record.h).
  const std::string run = policy::RunName(log_->pending_run());
  replication::StandInRecord stood_in;
  if (config_.shared && log_->pending_run() != 0) {
    Result<replication::StandInRecord> record =
        replication::ReadStandInRecord(*env_, root_fd_, config_.node, run);
    if (record.ok()) {
      stood_in = *record;
    } else {
      spdlog::warn("recovery: the record of what a partner made durable for run {} cannot be "
                   "read ({}): every version is published again", run, record.status().ToString());
    }
  }
  // What is replayed is logged anew in the other half, which becomes the log once all is.
  log_->BeginRecovery();
  size_t versions = 0, lost = 0, by_partner = 0;
  uint64_t bytes = 0;
  for (const LoggedEntry& e : state.entries) {
    const bool publish = e.kind == JournalEntry::Kind::kPublish;
    const bool rename = e.kind == JournalEntry::Kind::kRename;
    if (publish || rename) {
      // A rename publishes a marker when it renames to one (a partner may have published it).
      const std::string& path = publish ? e.names[0] : e.new_path;
      const std::string base = path.substr(path.rfind('/') + 1);
      const bool marker = policy::IsCommitMarker(base, config_.commit_markers);
      if ((publish || marker) &&
          !policy::RecoveryRepublishes(e.seq, stood_in.through, stood_in.markers, marker)) {
        by_partner += publish;
        continue;
      }
    }
    Status st = ReplayEntry(e, adopted);
    if (st.ok() || (!publish && AlreadyThere(st))) {
      versions += publish;
      bytes += publish ? e.size : 0;
      continue;
    }
    spdlog::error("recovery: {} of {}: {}", KindName(e.kind), publish ? e.names[0] : e.path,
                  st.ToString());
    lost += publish;
  }
  log_->Commit();
  if (stood_in != replication::StandInRecord{}) {
    spdlog::info("recovery: {} file versions of run {} were made durable by a partner while "
                 "this node was dead (through its seq {}, its commit markers through {}): not "
                 "published again",
                 by_partner, run, stood_in.through, stood_in.markers);
    (void)replication::RemoveStandInRecord(*env_, root_fd_, config_.node, run);
  }
  stats_.recovered_versions += versions;
  stats_.recovered_bytes += bytes;
  spdlog::info("recovered what was not yet durable at the crash: {} changes, {} file "
               "versions ({} bytes){}", state.entries.size(), versions, bytes,
               state.dropped ? "; its log was full, so changes after these were lost" : "");
  if (lost > 0) {
    return Status::Error(EIO, std::to_string(lost) + " file versions could not be recovered");
  }
  return state.dropped ? LogWasFull() : Status::Ok();
}

}  // namespace ckptfs
