#include "core/shared/shared_store.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>

#include "core/backing/backing_paths.h"
#include "core/shared/shared_policy.h"

namespace ckptfs {
namespace {

// Names of one directory asked for in one LIST page.
constexpr unsigned kListPage = 1000;
// Largest error answer of the store read.
constexpr size_t kErrorAnswerBytes = 64 << 10;

bool IsPlainName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

// A directory of the area: one or two plain names.
bool IsAreaDir(const std::string& dir) {
  const size_t slash = dir.find('/');
  if (slash == std::string::npos) return IsPlainName(dir);
  return IsPlainName(dir.substr(0, slash)) && IsPlainName(dir.substr(slash + 1));
}

// Lets a request be retried kRequestRetries times.
RetryHook FewRetries() {
  return [tries = 0u](const Status&) mutable { return ++tries <= SharedStore::kRequestRetries; };
}

}  // namespace

Result<std::unique_ptr<SharedStore>> SharedStore::Make(const S3Settings& settings) {
  Result<std::unique_ptr<S3Client>> client = S3Client::Make(settings);
  if (!client.ok()) return client.status();
  const std::string& prefix = settings.location.prefix;
  std::string root = (prefix.empty() ? "" : prefix + "/") + kReservedName + "/" + kSharedDirName +
                     "/";
  return std::unique_ptr<SharedStore>(new SharedStore(std::move(*client), std::move(root)));
}

Result<std::vector<std::string>> SharedStore::ListLocked(const std::string& dir,
                                                         bool files_only) {
  if (!IsAreaDir(dir)) return Status::Error(EINVAL, "no shared directory " + dir);
  const std::string under = root_ + dir + "/";
  std::vector<std::string> names;
  std::string token;
  do {
    Result<S3Client::ListPage> page = client_->ListObjects(under, token, kListPage, FewRetries());
    if (!page.ok()) return page.status();
    auto add = [&](const std::string& key) {
      if (key.size() <= under.size() || key.compare(0, under.size(), under) != 0) return;
      std::string name = key.substr(under.size());
      if (!name.empty() && name.back() == '/') name.pop_back();
      if (IsPlainName(name) && names.size() < policy::kMaxListedNames) {
        names.push_back(std::move(name));
      }
    };
    for (const S3Client::ListedObject& o : page->objects) add(o.key);
    if (!files_only) {
      for (const std::string& p : page->prefixes) add(p);
    }
    // A token the store repeats would loop forever.
    if (page->next_token == token) break;
    token = page->next_token;
  } while (!token.empty() && names.size() < policy::kMaxListedNames);
  return names;
}

Result<std::vector<std::string>> SharedStore::List(const std::string& dir) {
  MutexLock lock(mu_);
  return ListLocked(dir, /*files_only=*/false);
}

Result<std::string> SharedStore::Read(const std::string& dir, const std::string& name,
                                      size_t max_bytes) {
  if (!IsAreaDir(dir) || !IsPlainName(name)) {
    return Status::Error(EINVAL, "no shared file " + dir + "/" + name);
  }
  MutexLock lock(mu_);
  // Room for the store's error answers too (a 404 says ENOENT, whatever `max_bytes`).
  Result<std::string> got = client_->GetObject(root_ + dir + "/" + name,
                                               std::max(max_bytes, kErrorAnswerBytes), FewRetries());
  if (got.ok() && got->size() > max_bytes) {
    return Status::Error(EFBIG, dir + "/" + name + " holds " + std::to_string(got->size()) +
                                    " bytes");
  }
  return got;
}

Status SharedStore::Replace(const std::string& dir, const std::string& name,
                            const std::string& /*temp_name*/, const std::string& content) {
  if (!IsAreaDir(dir) || !IsPlainName(name)) {
    return Status::Error(EINVAL, "no shared file " + dir + "/" + name);
  }
  // The client puts a body from a descriptor.
  const int fd = memfd_create("ckptfs-shared-object", MFD_CLOEXEC);
  if (fd < 0) return Status::FromErrno("memfd_create");
  Status st = Status::Ok();
  if (pwrite(fd, content.data(), content.size(), 0) != static_cast<ssize_t>(content.size())) {
    st = Status::FromErrno("writing the object of " + dir + "/" + name);
  }
  if (st.ok()) {
    MutexLock lock(mu_);
    st = client_->PutObject(root_ + dir + "/" + name, fd, 0, content.size(), FewRetries())
             .status();
  }
  close(fd);
  return st;
}

Status SharedStore::Remove(const std::string& dir, const std::string& name) {
  if (!IsAreaDir(dir) || !IsPlainName(name)) {
    return Status::Error(EINVAL, "no shared file " + dir + "/" + name);
  }
  MutexLock lock(mu_);
  return client_->DeleteObject(root_ + dir + "/" + name, FewRetries());
}

Status SharedStore::MakeDir(const std::string& dir) {
  return IsAreaDir(dir) ? Status::Ok() : Status::Error(EINVAL, "no shared directory " + dir);
}

Status SharedStore::RemoveDir(const std::string& dir) {
  MutexLock lock(mu_);
  Result<std::vector<std::string>> names = ListLocked(dir, /*files_only=*/true);
  if (!names.ok()) return names.status();
  for (const std::string& name : *names) {
    Status removed = client_->DeleteObject(root_ + dir + "/" + name, FewRetries());
    if (!removed.ok()) return removed;
  }
  return Status::Ok();
}

}  // namespace ckptfs
