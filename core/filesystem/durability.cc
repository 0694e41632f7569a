#include "core/filesystem/durability.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "core/backing/backing_paths.h"
#include "core/recovery/rescue.h"
#include "core/replication/replication_policy.h"
#include "core/shared/shared_dir.h"
#include "core/shared/shared_store.h"

namespace ckptfs {

Durability::Durability(const Parts& parts)
    : parts_(parts),
      reclaimer_(parts.ns, parts.stats, parts.store.staging_fd, parts.config.worker),
      flusher_(std::make_unique<Flusher>(parts.config, parts.env, parts.clock,
                                         parts.store.staging_fd, parts.journal, parts.stats,
                                         static_cast<FlushClient&>(*this))) {}

Status Durability::JoinSharedMount(const S3Settings* remote) {
  Journal& journal = parts_.journal;
  const Config& config = parts_.config;
  if (config.replicas > 0) {
    Result<replication::GroupSecret> secret =
        replication::GroupSecret::Load(config.replication_secret);
    if (!secret.ok()) return secret.status();
    replication::ReplicatorSettings settings;
    settings.node = config.node;
    settings.replicas = config.replicas;
    if (!config.replication_address.empty()) settings.bind_address = config.replication_address;
    settings.store_bytes = config.replica_memory != 0
                               ? config.replica_memory
                               : policy::DefaultPartnerStoreBytes(config.cache_size);
    Result<std::unique_ptr<replication::Replicator>> replicator =
        replication::Replicator::Start(std::move(settings), std::move(*secret));
    if (!replicator.ok()) return replicator.status();
    replicator_ = std::move(*replicator);
  }
  // With -o remote the group meets on the store, and what a member reports durable, which the
  // others' commits wait for, is what is on the store.
  std::unique_ptr<SharedArea> area;
  ProgressFn progress;
  if (remote) {
    Result<std::unique_ptr<SharedStore>> on_store = SharedStore::Make(*remote);
    if (!on_store.ok()) return on_store.status();
    area = std::move(*on_store);
    progress = [this, &journal] {
      return FlushProgress{journal.last_seq(), UploadedSeq(), journal.pending_bytes()};
    };
  } else {
    Result<std::unique_ptr<SharedDirectory>> directory =
        SharedDirectory::Open(parts_.env, parts_.store.root_fd);
    if (!directory.ok()) return directory.status();
    area = std::move(*directory);
    progress = [&journal] {
      return FlushProgress{journal.last_seq(), journal.durable_seq(), journal.pending_bytes()};
    };
  }
  Result<std::unique_ptr<SharedMount>> shared =
      SharedMount::Join(config, std::move(area), parts_.clock, std::move(progress),
                        replicator_ ? replicator_->endpoint() : "");
  if (!shared.ok()) {
    return Status::Error(shared.status().err(),
                         "cannot join the shared mounts: " +
                             shared.status().message());
  }
  shared_ = std::move(*shared);
  if (replicator_) {
    stand_in_env_ = MakePosixEnv();
    stand_in_ = std::make_unique<replication::StandInWriter>(
        *stand_in_env_, parts_.store.root_fd, parts_.store.staging_fd, replicator_->store(),
        config.commit_markers);
    shared_->SetStandIn(replicator_->run(), [writer = stand_in_.get()](
                                                const MemberId& dead,
                                                const std::optional<Sight>& sight) {
      if (!sight) return writer->Complete({dead.node, ""}, std::nullopt);
      return writer->Complete({dead.node, sight->run}, sight->sealed);
    });
    const std::string self = config.node;
    DeadCommitterFns dead_committer;
    dead_committer.markers = [writer = stand_in_.get(), self](
                                 const std::vector<std::string>& live) {
      std::vector<DeadCommitterMarker> markers;
      for (replication::HeldDeadMarker& m : writer->DeadMarkersToCommit(self, live)) {
        markers.push_back({m.owner.node, m.owner.run, m.seq, std::move(m.path)});
      }
      return markers;
    };
    dead_committer.publish = [writer = stand_in_.get()](const DeadCommitterMarker& m) {
      return writer->PublishDeadMarker({{m.node, m.run}, m.seq, m.path});
    };
    shared_->SetDeadCommitter(std::move(dead_committer));
  }
  RemoveStagingLeftovers(parts_.env, parts_.store.staging_fd,
                         TakesOverStagedFiles(parts_.config));
  SharedMount* mount = shared_.get();
  flusher_->HoldMarkers([mount](const std::string& marker) { return mount->Post(marker); },
                        [mount] { mount->DataDurable(); });
  if (parts_.config.recovers_earlier_mount) {
    // Other members may have published a newer marker of the same name since the dead mount
    // sealed its own: no clock tells which is newer, so what is there stays.
    flusher_->DropMarkersOverTakenNames(
        "recovered from a mount whose daemon died before its commit, and the name is taken on "
        "the backing store (by a marker that may be newer); the files beside it are published");
  }
  return Status::Ok();
}

Status Durability::ConnectRemote(const S3Settings& remote,
                                 UploaderSettings::OnUploaded on_uploaded) {
  const Config& config = parts_.config;
  UploaderSettings settings;
  settings.s3 = remote;
  settings.part_size = config.remote_part_size;
  settings.concurrency = config.remote_concurrency;
  settings.markers = config.commit_markers;
  // Uploaded files are named by their real paths under the backing directory's.
  char root[PATH_MAX];
  if (!realpath(config.backing_dir.c_str(), root)) return Status::FromErrno(config.backing_dir);
  settings.backing_root = root;
  // The upload log lives in the private area, one per member in shared mode.
  const int reserved = openat(parts_.store.root_fd, kReservedName,
                              O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
  if (reserved < 0) return Status::FromErrno(std::string(kReservedName));
  upload_log_dir_ = reserved;
  settings.log_dir_fd = reserved;
  settings.log_name = config.shared ? "uploads-" + config.node + ".log" : "uploads.log";
  settings.abort_open_uploads = !config.shared;
  settings.reserved_name = kReservedName;
  // A member whose uploads advanced may owe acknowledgements now (the group meets on the store).
  SharedMount* shared = config.shared ? shared_.get() : nullptr;
  settings.on_uploaded = [shared, on_uploaded = std::move(on_uploaded)](
                             const std::string& path, uint64_t ino, uint64_t size,
                             int64_t mtime_ns, const std::string& etag) {
    if (on_uploaded) on_uploaded(path, ino, size, mtime_ns, etag);
    if (shared) shared->DataDurable();
  };
  Result<std::unique_ptr<Uploader>> uploader = Uploader::Start(settings, parts_.stats);
  if (!uploader.ok()) return uploader.status();
  uploader_ = std::move(*uploader);
  spdlog::info("remote: uploading to {} (credentials from {})", remote.location.ToString(),
               remote.credentials.source);
  return Status::Ok();
}

void Durability::HandOverUploads(const FlushReport& report) {
  auto backing_fd = [](const InodeRef& dir) {
    std::shared_ptr<BackingFile> backing = dir ? dir->BackingDir() : nullptr;
    return backing ? backing->fd() : -1;
  };
  // The paths of the directories this batch removed: their descriptors name them no more, and
  // the files removed in them before are named through them. A directory is removed after what
  // it held, so resolved from the batch's end, parents first.
  std::unordered_map<const Inode*, std::string> removed_dirs;
  auto dir_path = [&](const InodeRef& dir) -> std::optional<std::string> {
    if (!dir) return std::nullopt;
    if (auto it = removed_dirs.find(dir.get()); it != removed_dirs.end()) return it->second;
    const int fd = backing_fd(dir);
    return fd >= 0 ? uploader_->RelativePath(fd) : std::nullopt;
  };
  auto path_in = [](const std::string& dir, const std::string& name) {
    return dir.empty() ? name : dir + "/" + name;
  };
  for (auto it = report.durable.rbegin(); it != report.durable.rend(); ++it) {
    const EntryRef& e = *it;
    if (e->kind != JournalEntry::Kind::kRmdir || !e->victim) continue;
    if (std::optional<std::string> parent = dir_path(e->parent)) {
      removed_dirs[e->victim.get()] = path_in(*parent, e->name);
    }
  }
  // Paths are found as the backing directory is now, after every change of the batch; the store
  // gets the changes in journal order, so each path is taken back to what it was at its entry
  // through the directories the batch renamed after it (from the last one back).
  struct DirRename {
    size_t at;  // Its entry's place in the batch.
    std::string from, to;
  };
  std::vector<DirRename> dir_renames;
  const auto is_dir_rename = [](const EntryRef& e) {
    return e->kind == JournalEntry::Kind::kRename && e->inode &&
           e->inode->type == FileType::kDirectory;
  };
  for (size_t i = 0; i < report.durable.size(); ++i) {
    const EntryRef& e = report.durable[i];
    if (!is_dir_rename(e) || (shared_ && parts_.journal.StateOf(e).held)) continue;
    const std::optional<std::string> from = dir_path(e->parent);
    const std::optional<std::string> to = dir_path(e->new_parent);
    if (from && to) dir_renames.push_back({i, path_in(*from, e->name), path_in(*to, e->new_name)});
  }
  auto as_journaled = [&dir_renames](std::string path, size_t at) {
    for (auto r = dir_renames.rbegin(); r != dir_renames.rend() && r->at > at; ++r) {
      if (path == r->to || path.compare(0, r->to.size() + 1, r->to + "/") == 0) {
        path = r->from + path.substr(r->to.size());
      }
    }
    return path;
  };
  for (size_t k = dir_renames.size(); k-- > 0;) {
    dir_renames[k].from = as_journaled(dir_renames[k].from, dir_renames[k].at);
    dir_renames[k].to = as_journaled(dir_renames[k].to, dir_renames[k].at);
  }
  size_t next_dir_rename = 0;
  for (size_t i = 0; i < report.durable.size(); ++i) {
    const EntryRef& e = report.durable[i];
    if (shared_ && parts_.journal.StateOf(e).held) continue;
    auto path_at = [&](const InodeRef& dir, const std::string& name) -> std::optional<std::string> {
      const std::optional<std::string> in = dir_path(dir);
      if (!in) return std::nullopt;
      return as_journaled(path_in(*in, name), i);
    };
    auto hand_over = [&](const InodeRef& dir, const std::string& name,
                         const std::string& replaced) {
      const int fd = backing_fd(dir);
      const std::optional<std::string> path = path_at(dir, name);
      if (fd >= 0 && path) uploader_->Enqueue(fd, name, *path, replaced);
    };
    const bool file = e->inode && e->inode->type == FileType::kRegular;
    switch (e->kind) {
      case JournalEntry::Kind::kPublish:
        for (const Inode::Name& n : e->names) hand_over(n.parent, n.name, "");
        break;
      case JournalEntry::Kind::kRename:
        if (file) {
          hand_over(e->new_parent, e->new_name, path_at(e->parent, e->name).value_or(""));
        } else if (next_dir_rename < dir_renames.size() && dir_renames[next_dir_rename].at == i) {
          uploader_->Move(dir_renames[next_dir_rename].from, dir_renames[next_dir_rename].to);
          ++next_dir_rename;
        }
        break;
      case JournalEntry::Kind::kLink:
        if (file) hand_over(e->new_parent, e->new_name, "");
        break;
      case JournalEntry::Kind::kUnlink:
        if (e->victim && e->victim->type == FileType::kRegular) {
          if (std::optional<std::string> path = path_at(e->parent, e->name)) {
            uploader_->Remove(*path);
          }
        }
        break;
      default:
        break;
    }
  }
  if (shared_ && !report.durable.empty()) {  // Only the shared mode asks for UploadedSeq.
    uint64_t last = 0;
    for (const EntryRef& e : report.durable) last = std::max(last, e->seq);
    const uint64_t handed_over = uploader_->Progress().handed_over;
    MutexLock lock(uploaded_mu_);
    uploaded_.HandedOver(last, handed_over);
  }
  // Before the journal completes these entries: until then the recovery publishes them again.
  if (Status st = uploader_->SyncLog(); !st.ok()) {
    parts_.stats.remote_errors++;
    spdlog::error("remote: the upload log cannot be written ({}): uploads not yet done are lost "
                  "if this worker dies", st.ToString());
  }
}

uint64_t Durability::UploadedSeq() {
  if (!uploader_) return 0;
  // In this order: UploadedPoint::Point.
  const uint64_t durable = parts_.journal.durable_seq();
  const uint64_t done = uploader_->Progress().done_in_order;
  MutexLock lock(uploaded_mu_);
  return uploaded_.Point(durable, done);
}

Status Durability::TookOver(Status taken) {
  if (!taken.ok() && shared_) shared_->ForgetPredecessor();
  return taken;
}

void Durability::Start() {
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
  if (replicator_) {
    replication_feed_ = std::make_unique<ReplicationFeed>(
        parts_.journal, parts_.ns, *shared_, *replicator_, parts_.config.poll_interval);
    replication_feed_->Start();
  }
}

void Durability::StopReplicating() {
  if (replication_feed_) replication_feed_->Stop();
  if (replicator_) {
    // The partners drop what is durable now (everything, after a drain).
    replicator_->Durable(parts_.journal.durable_seq());
    replicator_->Stop();
  }
}

void Durability::LeaveSharedMount() {
  StopReplicating();
  if (shared_) shared_->Leave();
}

void Durability::HandOverSharedMount() {
  StopReplicating();
  if (shared_) shared_->HandOver();
}

void Durability::Stop() {
  LeaveSharedMount();
  uploader_.reset();
  if (upload_log_dir_ >= 0) close(upload_log_dir_);
  upload_log_dir_ = -1;
  flusher_.reset();
  replication_feed_.reset();
  shared_.reset();
  stand_in_.reset();
  replicator_.reset();
}

Status Durability::WaitDurable(uint64_t point) {
  if (Status st = flusher_->WaitCommitted(point); !st.ok()) return NamingUnflushed(st, point);
  // Nothing of what was closed is missing, but writers are stuck: a sync says so too.
  return flusher_->spill_error();
}

Status Durability::WaitReplicated(uint64_t point) {
  // How often a wait looks at the flusher's failures (and whether replication stopped).
  constexpr std::chrono::milliseconds kLook{20};
  if (!replicator_) return Status::Error(EINVAL, "fsync=replicated without replicas");
  replication_feed_->Nudge();
  while (!replicator_->WaitReplicated(point, kLook)) {
    if (parts_.journal.durable_seq() >= point) return Status::Ok();
    if (Status failed = flusher_->last_error(); !failed.ok()) {
      return NamingUnflushed(failed, point);
    }
    if (replication_feed_->stopped()) return Status::Error(EIO, "replication stopped");
  }
  return Status::Ok();
}

Status Durability::NamingUnflushed(const Status& error, uint64_t point) {
  constexpr size_t kNamed = 100;
  std::vector<std::string> paths;
  std::unordered_set<std::string> seen;
  {
    NamespaceLock lock(parts_.ns.mutex());
    for (const EntryRef& e : parts_.journal.Unflushed()) {
      if (e->seq > point || e->kind != JournalEntry::Kind::kPublish) continue;
      std::string path = e->names.empty() ? e->name : parts_.ns.PathLocked(e->inode);
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

Status Durability::Drain() {
  {
    NamespaceLock lock(parts_.ns.mutex());
    Namespace& ns = parts_.ns;
    ns.ForEachLocked([&](const InodeRef& inode) REQUIRES(ns_lock) { ns.SealLocked(inode); });
  }
  Status st = flusher_->Drain(parts_.config.unmount_retry);
  LeaveSharedMount();
  if (uploader_) {
    // What is durable stays in the backing directory whatever happens here.
    // Recovering an earlier mount's files leaves their uploads to the mount that follows.
    const auto wait = parts_.config.recovers_earlier_mount ? std::chrono::milliseconds(0)
                                                           : parts_.config.unmount_retry;
    if (Status left = uploader_->Stop(wait); !left.ok() && wait.count() > 0) {
      spdlog::error("remote: unmounting with uploads left undone: {}", left.ToString());
    }
  }
  if (st.ok() && parts_.config.shared) {
    // A member's own staging directory goes with it (it stays when something is left in it).
    (void)parts_.env.Unlink(
        parts_.store.root_fd,
        std::string(kReservedName) + "/" + kStagingDirName + "/" + parts_.config.node, true);
  }
  if (st.ok()) return st;
  std::vector<UnflushedFile> files;
  {
    NamespaceLock lock(parts_.ns.mutex());
    for (const EntryRef& e : parts_.journal.Unflushed()) {
      if (e->kind != JournalEntry::Kind::kPublish) continue;
      files.push_back(
          {e->names.empty() ? e->name : parts_.ns.PathLocked(e->inode), e->snapshot});
    }
  }
  Result<std::string> where =
      SaveToRescueDirectory(parts_.env, parts_.store.root_fd, parts_.config.backing_dir, files);
  std::string list;
  for (const UnflushedFile& f : files) list += (list.empty() ? "" : ", ") + f.path;
  if (!where.ok()) {
    return Status::Error(st.err(), "could not write " + list + " (" + st.message() +
                                       ") and could not save them: " + where.status().ToString());
  }
  return Status::Error(st.err(), "could not write " + list + " (" + st.message() +
                                     "); their contents were saved to " + *where);
}

std::string Durability::PathOf(const EntryRef& entry) {
  NamespaceLock lock(parts_.ns.mutex());
  return parts_.ns.PathLocked(entry->inode);
}

Status Durability::Flushed(const FlushReport& report) {
  if (uploader_) HandOverUploads(report);
  NamespaceLock lock(parts_.ns.mutex());
  for (const EntryRef& e : report.applied) e->inode->on_backing = true;
  for (const EntryRef& e : report.durable) {
    // A held marker is not on the backing store under its names yet (core/flush/held_markers.h).
    if (shared_ && parts_.journal.StateOf(e).held) continue;
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
                            parts_.ns.PathLocked(failed->inode) + ": " + report.error.message() +
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
