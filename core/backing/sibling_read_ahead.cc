#include "core/backing/sibling_read_ahead.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <utility>

namespace ckptfs {
namespace {

constexpr size_t kMaxQueuedOpens = 1024;  // More are dropped: a hint may be lost.

}  // namespace

SiblingReadAhead::SiblingReadAhead(Env& env, std::atomic<uint64_t>& files_read_ahead,
                                   uint64_t max_file_bytes, SiblingListingLimits limits)
    : env_(env),
      files_read_ahead_(files_read_ahead),
      max_file_bytes_(max_file_bytes),
      limits_(limits) {}

SiblingReadAhead::~SiblingReadAhead() {
  {
    MutexLock lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void SiblingReadAhead::Opened(std::shared_ptr<BackingFile> dir, std::string name) {
  bool was_empty;
  {
    MutexLock lock(mu_);
    if (stop_ || queue_.size() >= kMaxQueuedOpens) return;
    was_empty = queue_.empty();
    queue_.push_back({std::move(dir), std::move(name)});
    if (!thread_.joinable()) thread_ = std::thread([this] { Run(); });
  }
  // The thread waits only for an empty queue: a queue that held opens already has it awake.
  if (was_empty) wake_.notify_one();
}

void SiblingReadAhead::Drain() {
  MutexLock lock(mu_);
  idle_.wait(lock, [&]() REQUIRES(mu_) { return stop_ || (queue_.empty() && !busy_); });
}

void SiblingReadAhead::Run() {
  MutexLock lock(mu_);
  while (true) {
    wake_.wait(lock, [&]() REQUIRES(mu_) { return stop_ || !queue_.empty(); });
    if (stop_) break;
    Open open = std::move(queue_.front());
    queue_.pop_front();
    busy_ = true;
    lock.Unlock();
    ActOn(open);
    lock.Lock();
    busy_ = false;
    if (queue_.empty()) idle_.notify_all();
  }
  queue_.clear();
  idle_.notify_all();
}

void SiblingReadAhead::ActOn(const Open& open) {
  ++acted_;
  Listing* listing = ListingOf(open.dir, open.name);
  if (!listing) return;
  listing->used = acted_;
  const auto at = std::lower_bound(listing->names.begin(), listing->names.end(), open.name);
  if (at == listing->names.end() || *at != open.name) return;
  const auto [first, end] = policy::SiblingsToReadAhead(
      listing->cursor, static_cast<size_t>(at - listing->names.begin()), listing->names.size(),
      policy::kSiblingReadAheadWindow);
  for (size_t i = first; i < end; ++i) ReadAheadFile(open.dir->fd(), listing->names[i]);
}

SiblingReadAhead::Listing* SiblingReadAhead::ListingOf(const std::shared_ptr<BackingFile>& dir,
                                                       const std::string& name) {
  const auto now = std::chrono::steady_clock::now();
  auto found = listings_.find(dir.get());
  if (found != listings_.end()) {
    Listing& held = found->second;
    if (held.too_many_names) return nullptr;
    if (std::binary_search(held.names.begin(), held.names.end(), name) ||
        now - held.listed_at < policy::kSiblingListAgainAfter) {
      return &held;
    }
  }
  // A descriptor of its own: listing reads and moves the directory's offset, which the
  // namespace's descriptor of it must keep.
  Result<int> fd = env_.Open(dir->fd(), ".", O_RDONLY | O_DIRECTORY);
  if (!fd.ok()) return nullptr;
  Result<std::vector<std::string>> names = env_.ListDir(*fd);
  env_.Close(*fd);
  // Where the loader was, by name, to carry over into the new listing.
  std::string last_opened, read_ahead_end;
  if (found != listings_.end()) {
    const Listing& held = found->second;
    if (held.cursor.last_opened < held.names.size()) {
      last_opened = held.names[held.cursor.last_opened];
    }
    if (held.cursor.read_ahead_end < held.names.size()) {
      read_ahead_end = held.names[held.cursor.read_ahead_end];
    }
    listed_names_ -= held.names.size();
    listings_.erase(found);
  }
  if (!names.ok()) return nullptr;
  const bool too_many_names = names->size() > limits_.directory_names;
  if (too_many_names) names->clear();
  while (!listings_.empty() && (listings_.size() >= limits_.directories ||
                                listed_names_ + names->size() > limits_.names)) {
    auto oldest = std::min_element(listings_.begin(), listings_.end(), [](const auto& a,
                                                                          const auto& b) {
      return a.second.used < b.second.used;
    });
    listed_names_ -= oldest->second.names.size();
    listings_.erase(oldest);
  }
  std::sort(names->begin(), names->end());
  listed_names_ += names->size();
  Listing& made = listings_[dir.get()];
  made.dir = dir;
  made.names = std::move(*names);
  made.listed_at = now;
  made.used = acted_;
  made.too_many_names = too_many_names;
  if (too_many_names) return nullptr;
  const auto index_of = [&](const std::string& at) {
    return static_cast<size_t>(std::lower_bound(made.names.begin(), made.names.end(), at) -
                               made.names.begin());
  };
  if (!last_opened.empty()) made.cursor.last_opened = index_of(last_opened);
  if (!read_ahead_end.empty()) made.cursor.read_ahead_end = index_of(read_ahead_end);
  return &made;
}

void SiblingReadAhead::ReadAheadFile(int dir_fd, const std::string& name) {
  struct stat st {};
  if (!env_.Stat(dir_fd, name, &st).ok() || !S_ISREG(st.st_mode) || st.st_size == 0 ||
      static_cast<uint64_t>(st.st_size) > max_file_bytes_) {
    return;
  }
  Result<int> fd = env_.Open(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  if (!fd.ok()) return;
  env_.Advise(*fd, 0, static_cast<uint64_t>(st.st_size));
  env_.Close(*fd);
  files_read_ahead_.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace ckptfs
