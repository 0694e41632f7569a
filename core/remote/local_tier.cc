#include "core/remote/local_tier.h"

#include <fcntl.h>
#include <linux/falloc.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "core/backing/backing_paths.h"
#include "core/base/nanos.h"
#include "core/remote/local_tier_policy.h"
#include "core/remote/open_beneath.h"
#include "core/remote/remote_read_policy.h"

namespace ckptfs {
LocalTier::LocalTier(const Settings& settings, Stats& stats, Gate gate,
                     std::function<uint64_t()> pending_bytes)
    : settings_(settings),
      stats_(stats),
      gate_(std::move(gate)),
      pending_bytes_(std::move(pending_bytes)) {}

void LocalTier::Start() { thread_ = std::thread([this] { Run(); }); }

LocalTier::~LocalTier() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void LocalTier::OnStore(const std::string& path, uint64_t ino, uint64_t size, int64_t mtime_ns,
                        const std::string& etag) {
  {
    MutexLock lock(mu_);
    resident_[path] = {ino, size, mtime_ns, etag, ++next_seq_};
  }
  wake_.notify_all();
}

uint64_t LocalTier::ResidentBytes() const {
  MutexLock lock(mu_);
  uint64_t bytes = 0;
  for (const auto& [path, r] : resident_) bytes += r.size;
  return bytes;
}

void LocalTier::Run() {
  MutexLock lock(mu_);
  while (!stop_) {
    wake_.wait_for(lock, std::chrono::seconds(1));
    if (stop_) break;
    std::vector<policy::ResidentFile> files;
    std::vector<std::pair<std::string, Resident>> entries;
    for (const auto& [path, r] : resident_) {
      files.push_back({path, r.size, r.seq});
      entries.emplace_back(path, r);
    }
    lock.Unlock();
    const uint64_t pending = pending_bytes_();
    std::vector<std::string> done;  // Evicted, or no longer the file that reached the store.
    for (size_t i : policy::ChooseEvictions(files, pending, settings_.local_size)) {
      const std::string& path = entries[i].first;
      const Resident& r = entries[i].second;
      bool gone = false;
      const bool evicted = gate_(path, [&] {
        gone = !Evict(path, r);
        return !gone;
      });
      if (evicted || gone) done.push_back(path);
    }
    lock.Lock();
    for (const std::string& path : done) {
      auto it = resident_.find(path);
      // Not when it became resident again meanwhile (a newer upload or fetch).
      if (it != resident_.end()) {
        for (const auto& [p, r] : entries) {
          if (p == path && r.seq == it->second.seq) {
            resident_.erase(it);
            break;
          }
        }
      }
    }
  }
}

bool LocalTier::Evict(const std::string& path, const Resident& r) {
  const int fd = OpenBeneath(settings_.root_fd, path, O_RDWR);
  if (fd < 0) return false;
  struct stat st {};
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
            static_cast<uint64_t>(st.st_ino) == r.ino &&
            static_cast<uint64_t>(st.st_size) == r.size &&
            NanosOf(st.st_mtim) == r.mtime_ns;
  if (ok) {
    // Marked durably before its blocks go: a crash never leaves an unmarked hole.
    const std::string mark = policy::PlaceholderMark(r.etag, settings_.location.KeyOf(path));
    ok = fsetxattr(fd, kRemotePlaceholderAttr, mark.data(), mark.size(), 0) == 0 && fsync(fd) == 0;
    if (ok && r.size > 0 &&
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0,
                  static_cast<off_t>(r.size)) != 0) {
      spdlog::warn("remote: evicting {}: cannot free its blocks ({}); kept", path,
                   std::strerror(errno));
      (void)fremovexattr(fd, kRemotePlaceholderAttr);
      ok = false;
    }
    if (ok) {
      // The hole keeps the times: the placeholder shows the file as it was.
      const timespec times[2] = {st.st_atim, st.st_mtim};
      (void)futimens(fd, times);
      stats_.remote_files_evicted++;
      stats_.remote_bytes_evicted += r.size;
    }
  }
  close(fd);
  return ok;
}

}  // namespace ckptfs
