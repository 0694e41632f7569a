#include "core/remote/remote_reader.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <string_view>
#include <thread>

#include "core/backing/backing_paths.h"
#include "core/base/commit_markers.h"
#include "core/base/nanos.h"
#include "core/remote/remote_policy.h"
#include "core/remote/remote_read_policy.h"

namespace ckptfs {
namespace {

// Ranged GETs are retried this many times (with policy::RetryDelay between tries) before the
// fetch, and the open that asked for it, fail.
constexpr unsigned kFetchRetries = 6;

// An ETag kept with a placeholder and sent back in If-Match: printable, no spaces, bounded (the
// store is untrusted: a value with a line break would add headers); empty: none.
std::string UsableEtag(const std::string& etag) {
  if (etag.size() > policy::kMaxPlaceholderEtag) return "";
  for (char c : etag) {
    if (c <= 0x20 || c >= 0x7f) return "";
  }
  return etag;
}

// Untrusted text for a log line: printable ASCII, bounded.
std::string Printable(std::string_view text) {
  std::string out;
  for (char c : text.substr(0, 300)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  return out;
}

std::string JoinPath(const std::string& dir, const std::string& name) {
  return dir.empty() ? name : dir + "/" + name;
}

// What the backing directory holds under a name listed from the store.
struct LocalEntry {
  bool exists = false;
  bool regular = false;
  bool records_kept = true;  // False: the backing filesystem takes no user extended attributes.
  std::optional<std::string> etag;  // Its placeholder's mark's, else its record's (if of it now).
};

LocalEntry ReadLocalEntry(int dir_fd, const std::string& name) {
  LocalEntry entry;
  struct stat st {};
  if (fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    entry.exists = errno != ENOENT;  // Unreadable: kept as it is.
    return entry;
  }
  entry.exists = true;
  if (!S_ISREG(st.st_mode)) return entry;
  const int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return entry;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode)) {
    entry.regular = true;
    std::string text(policy::kMaxPlaceholderMark, '\0');
    ssize_t got = fgetxattr(fd, kRemotePlaceholderAttr, text.data(), text.size());
    if (got >= 0) {
      text.resize(static_cast<size_t>(got));
      const size_t split = text.find('\n');
      if (split != text.npos) entry.etag = UsableEtag(text.substr(0, split));
    } else if (errno == ENOTSUP || errno == EOPNOTSUPP) {
      entry.records_kept = false;
    } else {
      text.assign(policy::kMaxStoredVersion, '\0');
      got = fgetxattr(fd, kStoredVersionAttr, text.data(), text.size());
      if (got >= 0) {
        text.resize(static_cast<size_t>(got));
        entry.etag = policy::StoredEtagOf(
            text, static_cast<uint64_t>(st.st_size),
            NanosOf(st.st_mtim));
      }
    }
  }
  close(fd);
  return entry;
}

policy::ListedOverLocal Judge(const LocalEntry& local, const std::string& listed_etag,
                              policy::PendingChange pending) {
  return policy::JudgeListedOverLocal(local.exists, local.regular, local.records_kept, local.etag,
                                      listed_etag, pending);
}

// Records on fetched file `fd` (`size` bytes, mtime `mtime`) the ETag it was fetched with.
void RecordFetched(int fd, const std::string& etag, uint64_t size, const timespec& mtime) {
  if (etag.empty()) return;
  const std::string record = policy::FormatStoredVersion(
      etag, size, NanosOf(mtime));
  (void)fsetxattr(fd, kStoredVersionAttr, record.data(), record.size(), 0);
}

}  // namespace

Result<std::unique_ptr<RemoteReader>> RemoteReader::Make(const RemoteReaderSettings& settings,
                                                         Stats& stats) {
  std::unique_ptr<RemoteReader> reader(new RemoteReader(settings, stats));
  Result<std::unique_ptr<S3Client>> client = S3Client::Make(settings.s3);
  if (!client.ok()) return client.status();
  reader->GiveBack(std::move(*client));
  return reader;
}

RemoteReader::RemoteReader(const RemoteReaderSettings& settings, Stats& stats)
    : settings_(settings), stats_(stats) {}

Result<std::unique_ptr<S3Client>> RemoteReader::TakeClient() {
  {
    MutexLock lock(mu_);
    if (!idle_clients_.empty()) {
      std::unique_ptr<S3Client> client = std::move(idle_clients_.back());
      idle_clients_.pop_back();
      return client;
    }
  }
  return S3Client::Make(settings_.s3);
}

void RemoteReader::GiveBack(std::unique_ptr<S3Client> client) {
  MutexLock lock(mu_);
  idle_clients_.push_back(std::move(client));
}

bool RemoteReader::OnRetry(const Status& why) {
  stats_.remote_retries++;
  MutexLock lock(mu_);
  if (logged_kinds_.insert(policy::FailureKind(why.err(), why.message())).second) {
    spdlog::warn("remote: {} (retried; this kind of failure is logged once)", why.ToString());
  }
  return true;
}

Status RemoteReader::ListInto(int dir_fd, const std::string& relative_dir, const Gate& gate) {
  const std::string dir_prefix =
      policy::DirectoryKeyPrefix(settings_.s3.location.prefix, relative_dir);
  Result<std::unique_ptr<S3Client>> client = TakeClient();
  if (!client.ok()) return client.status();
  const RetryHook hook = [this](const Status& why) { return OnRetry(why); };
  std::vector<S3Client::ListedObject> objects;
  std::vector<std::string> prefixes;
  for (bool second = false;; second = true) {
    objects.clear();
    prefixes.clear();
    unsigned pages = 0;
    std::string token;
    bool found_marker = false;
    do {
      Result<S3Client::ListPage> page =
          (*client)->ListObjects(dir_prefix, token, policy::kListPageKeys, hook);
      if (!page.ok()) {
        GiveBack(std::move(*client));
        return page.status();
      }
      ++pages;
      for (S3Client::ListedObject& object : page->objects) {
        const std::string base = object.key.substr(object.key.rfind('/') + 1);
        found_marker |= policy::IsCommitMarker(base, settings_.markers);
        objects.push_back(std::move(object));
      }
      for (std::string& common : page->prefixes) prefixes.push_back(std::move(common));
      token = std::move(page->next_token);
    } while (!token.empty() && objects.size() + prefixes.size() < policy::kMaxListedEntries);
    if (!token.empty()) {
      spdlog::warn("remote: {}: over {} entries on the store; the rest is not shown",
                   dir_prefix, policy::kMaxListedEntries);
    }
    if (!policy::ListAgain(found_marker, pages, second)) break;
  }
  GiveBack(std::move(*client));
  stats_.remote_directories_listed++;

  Status first_error;
  auto judge = [&](const std::string& key, bool common, std::string* name) {
    switch (policy::JudgeListed(key, common, dir_prefix, relative_dir.empty(),
                                settings_.reserved_name, settings_.manifest_name, name)) {
      case policy::ListedVerdict::kShow:
        return true;
      case policy::ListedVerdict::kSkip:
        return false;
      case policy::ListedVerdict::kRefuse:
        stats_.remote_names_refused++;
        spdlog::warn("remote: the store lists \"{}\" under \"{}\": not a name of this "
                     "directory, not shown", Printable(key), Printable(dir_prefix));
        return false;
    }
    return false;
  };
  for (const std::string& common : prefixes) {
    std::string name;
    if (!judge(common, true, &name)) continue;
    gate(name, [&](policy::PendingChange pending) {
      // A directory whose removal is on its way to the store does not come back.
      if (pending == policy::PendingChange::kRemoval) return false;
      if (mkdirat(dir_fd, name.c_str(), 0755) != 0 && errno != EEXIST && first_error.ok()) {
        first_error =
            Status::FromErrno("remote: making directory " + JoinPath(relative_dir, name));
      }
      return false;
    });
  }
  const uint64_t replaced_before = stats_.remote_local_files_replaced.load();
  for (const S3Client::ListedObject& object : objects) {
    std::string name;
    if (!judge(object.key, false, &name)) continue;
    Status made = MakePlaceholder(dir_fd, name, JoinPath(relative_dir, name), object, gate);
    if (!made.ok() && first_error.ok()) first_error = made;
  }
  if (const uint64_t replaced = stats_.remote_local_files_replaced.load() - replaced_before) {
    spdlog::info("remote: /{}: {} local files are older than the store's objects of their names "
                 "(uploaded from elsewhere since): shown as the store has them",
                 Printable(relative_dir), replaced);
  }
  return first_error;
}

Status RemoteReader::MakePlaceholder(int dir_fd, const std::string& name,
                                     const std::string& relative_path,
                                     const S3Client::ListedObject& object, const Gate& gate) {
  const std::string etag = UsableEtag(object.etag);
  // What is pending only keeps the local file or skips the object: judged without it first, so
  // that no placeholder is made for a name whose local file stays.
  if (Judge(ReadLocalEntry(dir_fd, name), etag, policy::PendingChange::kNone) !=
      policy::ListedOverLocal::kPlaceholder) {
    return Status::Ok();
  }
  std::string staged;
  {
    MutexLock lock(mu_);
    staged = "remote-" + std::to_string(getpid()) + "-" + std::to_string(++staged_);
  }
  const int fd = openat(settings_.staging_fd, staged.c_str(),
                        O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno("remote: making a placeholder of " + relative_path);
  Status st_made;
  const std::string mark = policy::PlaceholderMark(etag, object.key);
  bool marked = true;
  if (ftruncate(fd, static_cast<off_t>(object.size)) != 0) {
    st_made = Status::FromErrno("remote: sizing the placeholder of " + relative_path);
  } else if (fsetxattr(fd, kRemotePlaceholderAttr, mark.data(), mark.size(), 0) != 0) {
    if (errno != ENOTSUP && errno != EOPNOTSUPP) {
      st_made = Status::FromErrno("remote: marking the placeholder of " + relative_path);
    } else {
      marked = false;  // No user extended attributes here: fetched now, whole.
      st_made = FetchRanges(fd, object.key, etag, object.size);
      if (st_made.ok() && fdatasync(fd) != 0) st_made = Status::FromErrno(relative_path);
    }
  }
  if (st_made.ok()) {
    if (std::optional<timespec> mtime = policy::ParseS3Time(object.last_modified)) {
      const timespec times[2] = {*mtime, *mtime};
      (void)futimens(fd, times);
    }
  }
  close(fd);
  bool placed = false;
  if (st_made.ok()) {
    gate(name, [&](policy::PendingChange pending) {
      const LocalEntry local = ReadLocalEntry(dir_fd, name);
      if (Judge(local, etag, pending) != policy::ListedOverLocal::kPlaceholder) return false;
      if (!local.exists) {
        // Never over a name made since.
        if (linkat(settings_.staging_fd, staged.c_str(), dir_fd, name.c_str(), 0) == 0) {
          placed = true;
        } else if (errno != EEXIST) {
          st_made = Status::FromErrno("remote: placing " + relative_path);
        }
        return false;
      }
      if (renameat(settings_.staging_fd, staged.c_str(), dir_fd, name.c_str()) != 0) {
        st_made = Status::FromErrno("remote: placing " + relative_path + " over its local file");
        return false;
      }
      placed = true;
      stats_.remote_local_files_replaced++;
      return true;
    });
  }
  (void)unlinkat(settings_.staging_fd, staged.c_str(), 0);
  if (placed && !marked) stats_.remote_files_fetched++;
  return st_made;
}

bool RemoteReader::IsPlaceholder(int fd) {
  return fgetxattr(fd, kRemotePlaceholderAttr, nullptr, 0) >= 0;
}

Status RemoteReader::Fetch(int fd, const std::string& what, std::string* fetched_etag) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return Status::FromErrno(what);
  const std::pair<uint64_t, uint64_t> id{st.st_dev, st.st_ino};
  {
    MutexLock lock(mu_);
    while (fetching_.count(id)) fetched_.wait(lock);
    fetching_.insert(id);
  }
  Status result;
  std::string mark(policy::kMaxPlaceholderMark, '\0');
  const ssize_t got = fgetxattr(fd, kRemotePlaceholderAttr, mark.data(), mark.size());
  if (got >= 0) {
    mark.resize(static_cast<size_t>(got));
    const size_t split = mark.find('\n');
    const std::string etag = split == mark.npos ? "" : UsableEtag(mark.substr(0, split));
    const std::string key = split == mark.npos ? "" : mark.substr(split + 1);
    if (!policy::IsPlaceholderKey(key, settings_.s3.location.prefix)) {
      result = Status::Error(EIO, "remote: " + what + ": its placeholder names no object of " +
                                      settings_.s3.location.ToString());
    } else {
      result = FetchRanges(fd, key, etag, static_cast<uint64_t>(st.st_size));
    }
    if (result.ok()) {
      const timespec times[2] = {st.st_atim, st.st_mtim};
      (void)futimens(fd, times);
      RecordFetched(fd, etag, static_cast<uint64_t>(st.st_size), st.st_mtim);
      if (fetched_etag) *fetched_etag = etag;
    }
    // The bytes are durable before the mark goes: a crash in between fetches them again.
    if (result.ok() && fdatasync(fd) != 0) result = Status::FromErrno(what);
    if (result.ok() && fremovexattr(fd, kRemotePlaceholderAttr) != 0 && errno != ENODATA) {
      result = Status::FromErrno("remote: unmarking " + what);
    }
    if (result.ok()) {
      stats_.remote_files_fetched++;
    } else {
      stats_.remote_errors++;
      spdlog::error("remote: fetching {} from the store failed: {}", what, result.ToString());
    }
  } else if (errno != ENODATA) {
    result = Status::FromErrno("remote: reading the mark of " + what);
  }
  {
    MutexLock lock(mu_);
    fetching_.erase(id);
  }
  fetched_.notify_all();
  return result;
}

Status RemoteReader::FetchRanges(int fd, const std::string& key, const std::string& etag,
                                 uint64_t size) {
  return FetchList(fd, key, etag, policy::PlanFetch(size, settings_.range_size));
}

Status RemoteReader::FetchList(int fd, const std::string& key, const std::string& etag,
                               const std::vector<policy::FetchRange>& ranges) {
  std::atomic<size_t> next{0};
  Mutex failed_mu;
  Status failed;
  const RetryHook hook = [this](const Status& why) { return OnRetry(why); };
  auto work = [&] {
    Result<std::unique_ptr<S3Client>> client = TakeClient();
    if (!client.ok()) {
      MutexLock lock(failed_mu);
      if (failed.ok()) failed = client.status();
      return;
    }
    for (size_t i = next++; i < ranges.size(); i = next++) {
      {
        MutexLock lock(failed_mu);
        if (!failed.ok()) break;
      }
      Status got = (*client)->GetRange(key, ranges[i].offset, ranges[i].length, fd, hook,
                                       kFetchRetries, etag);
      if (got.ok()) {
        stats_.remote_bytes_fetched += ranges[i].length;
        // Writeback starts now, beside the other ranges' GETs: the fdatasync before the mark
        // goes finds little left to write.
        (void)sync_file_range(fd, static_cast<off_t>(ranges[i].offset),
                              static_cast<off_t>(ranges[i].length), SYNC_FILE_RANGE_WRITE);
      }
      if (!got.ok()) {
        MutexLock lock(failed_mu);
        if (failed.ok()) failed = got;
      }
    }
    GiveBack(std::move(*client));
  };
  const size_t workers = std::min<size_t>(std::max(settings_.concurrency, 1u), ranges.size());
  std::vector<std::thread> threads;
  for (size_t i = 1; i < workers; ++i) threads.emplace_back(work);
  if (workers > 0) work();
  for (std::thread& t : threads) t.join();
  MutexLock lock(failed_mu);
  if (failed.message().find("HTTP 412") != std::string::npos) {
    return Status::Error(ESTALE, key + ": the object changed on the store since it was listed");
  }
  return failed;
}

RemoteReader::LazyFile::~LazyFile() {
  if (fd_ >= 0) close(fd_);
}

Result<std::shared_ptr<RemoteReader::LazyFile>> RemoteReader::OpenLazy(int fd,
                                                                       const std::string& what) {
  auto file = std::make_shared<LazyFile>();
  file->fd_ = fd;
  file->what_ = what;
  struct stat st {};
  if (fstat(fd, &st) != 0) return Status::FromErrno(what);
  std::string mark(policy::kMaxPlaceholderMark, '\0');
  const ssize_t got = fgetxattr(fd, kRemotePlaceholderAttr, mark.data(), mark.size());
  if (got < 0) {
    if (errno == ENODATA) return std::shared_ptr<LazyFile>();
    return Status::FromErrno("remote: reading the mark of " + what);
  }
  mark.resize(static_cast<size_t>(got));
  const size_t split = mark.find('\n');
  file->etag_ = split == mark.npos ? "" : UsableEtag(mark.substr(0, split));
  file->key_ = split == mark.npos ? "" : mark.substr(split + 1);
  if (!policy::IsPlaceholderKey(file->key_, settings_.s3.location.prefix)) {
    return Status::Error(EIO, "remote: " + what + ": its placeholder names no object of " +
                                  settings_.s3.location.ToString());
  }
  file->size_ = static_cast<uint64_t>(st.st_size);
  file->times_[0] = st.st_atim;
  file->times_[1] = st.st_mtim;
  MutexLock lock(file->mu_);
  file->ranges_.assign(policy::PlanFetch(file->size_, settings_.range_size).size(),
                       LazyFile::Range::kMissing);
  return file;
}

Result<bool> RemoteReader::EnsureFetched(LazyFile& file, uint64_t offset, uint64_t length) {
  const uint64_t range = std::max<uint64_t>(settings_.range_size, 1);
  std::vector<policy::FetchRange> mine;
  std::vector<size_t> mine_index;
  size_t first = 0, last = 0;  // The ranges read: [first, last).
  {
    MutexLock lock(file.mu_);
    if (file.complete_ || length == 0 || offset >= file.size_) return false;
    first = offset / range;
    last = std::min<size_t>((std::min(offset + length, file.size_) + range - 1) / range,
                            file.ranges_.size());
    const size_t ahead = std::min<size_t>(last + settings_.read_ahead, file.ranges_.size());
    for (size_t i = first; i < ahead; ++i) {
      if (file.ranges_[i] != LazyFile::Range::kMissing) continue;
      file.ranges_[i] = LazyFile::Range::kFetching;
      mine.push_back({i * range, std::min(range, file.size_ - i * range)});
      mine_index.push_back(i);
    }
  }
  Status fetched = mine.empty() ? Status::Ok() : FetchList(file.fd_, file.key_, file.etag_, mine);
  bool completed = false;
  {
    MutexLock lock(file.mu_);
    for (size_t i : mine_index) {
      file.ranges_[i] = fetched.ok() ? LazyFile::Range::kHere : LazyFile::Range::kMissing;
      if (fetched.ok()) ++file.here_;
    }
    file.changed_.notify_all();
    if (!fetched.ok()) {
      stats_.remote_errors++;
      spdlog::error("remote: fetching {} from the store failed: {}", file.what_,
                    fetched.ToString());
      return fetched;
    }
    // The ranges read that others are fetching.
    for (size_t i = first; i < last; ++i) {
      while (file.ranges_[i] == LazyFile::Range::kFetching) file.changed_.wait(lock);
      if (file.ranges_[i] != LazyFile::Range::kHere) {
        return Status::Error(EIO, "remote: fetching " + file.what_ + " failed");
      }
    }
    if (file.here_ == file.ranges_.size() && !file.complete_) {
      file.complete_ = completed = true;
    }
  }
  if (completed) {
    (void)futimens(file.fd_, file.times_);
    RecordFetched(file.fd_, file.etag_, file.size_, file.times_[1]);
    // The bytes are durable before the mark goes: a crash in between fetches them again.
    if (fdatasync(file.fd_) != 0 ||
        (fremovexattr(file.fd_, kRemotePlaceholderAttr) != 0 && errno != ENODATA)) {
      return Status::FromErrno("remote: completing " + file.what_);
    }
    stats_.remote_files_fetched++;
  }
  return completed;
}

}  // namespace ckptfs
