#include "core/flush/reclaim.h"

#include <fcntl.h>

#include <algorithm>
#include <string>
#include <unordered_set>
#include <vector>

#include "core/backing/backing_store.h"

namespace ckptfs {

size_t Reclaimer::UnloadLocked(const InodeRef& inode) {
  if (inode->type != FileType::kRegular || inode->open_handles > 0 || inode->names.empty() ||
      inode->view || inode->origin_dir || !inode->on_backing || ns_.PendingLocked(inode) ||
      inode->durable_version != inode->version) {
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

void Reclaimer::AddCandidateLocked(const InodeRef& inode) {
  candidates_.push_back(inode->ino);
  if (candidates_.size() < prune_at_) return;
  std::unordered_set<uint64_t> listed;
  std::erase_if(candidates_, [&](uint64_t ino) REQUIRES(ns_lock) {
    return !ns_.FindLocked(ino) || !listed.insert(ino).second;
  });
  prune_at_ = std::max(kPruneMinCandidates, 2 * candidates_.size());
}

size_t Reclaimer::Reclaim(size_t wanted) {
  NamespaceLock lock(ns_.mutex());
  size_t freed = 0;
  while (freed < wanted && !candidates_.empty()) {
    InodeRef inode = ns_.FindLocked(candidates_.front());
    candidates_.pop_front();
    if (!inode) continue;
    if (!inode->mu.try_lock()) {
      candidates_.push_back(inode->ino);
      break;
    }
    size_t blocks = UnloadLocked(inode);
    inode->mu.unlock();
    freed += blocks;
    stats_.evicted_blocks += blocks;
  }
  return freed;
}

Result<size_t> Reclaimer::Spill(Env& env) {
  InodeRef victim;
  std::string path;
  {
    NamespaceLock lock(ns_.mutex());
    size_t most = 0;
    ns_.ForEachLocked([&](const InodeRef& inode) {
      if (inode->type != FileType::kRegular || !inode->mu.try_lock()) return;
      if (inode->version != inode->sealed_version && inode->content.memory_blocks() > most) {
        most = inode->content.memory_blocks();
        victim = inode;
      }
      inode->mu.unlock();
    });
    if (victim) path = ns_.PathLocked(victim);
  }
  if (!victim) return 0;
  // The file, the step and the errno: the same for every retry of the same cause.
  auto failed = [&](const Status& st, const char* step) {
    return Status::Error(st.err(), "cannot spill " + path + ", open for writing (" + step + ")");
  };
  // The file's lock is held throughout: its content cannot change under the spill.
  MutexLock ilock(victim->mu);
  FileContent& content = victim->content;
  auto spilled = content.SpillCandidates();
  if (spilled.empty()) return 0;
  std::shared_ptr<BackingFile> file = content.base();
  // Reusable only when no sealed version shares it (then this copy and the content's are all).
  bool reuse = file && file->spill() && file.use_count() == 2;
  if (reuse) {
    if (Status st = env.Truncate(file->fd(), content.base_len()); !st.ok()) {
      return failed(st, "truncate its spill file");
    }
  } else {
    const std::string name = std::string(kSpillPrefix) + std::to_string(worker_) + "-" +
                             std::to_string(++spill_files_);
    Result<int> fd = env.Open(staging_fd_, name, O_CREAT | O_EXCL | O_RDWR | O_NOFOLLOW, 0600);
    if (!fd.ok()) return failed(fd.status(), "create a spill file");
    file = std::make_shared<BackingFile>(env, *fd, staging_fd_, name);
    if (content.base() && content.base_len() > 0) {
      Status st = content.base()->CopyPrefixTo(*fd, content.base_len());
      if (!st.ok()) return failed(st, "copy what was spilled before");
    }
  }
  std::vector<WriteRequest> requests =
      BlockWriteRequests(spilled, content.size(), file->fd(), /*direct=*/false);
  for (const Status& st : env.Write(requests)) {
    if (!st.ok()) return failed(st, "write");
  }
  size_t freed = content.AdoptSpill(std::move(file), spilled);
  if (spilled_) spilled_(*victim);
  stats_.spilled_blocks += freed;
  return freed;
}
}  // namespace ckptfs
