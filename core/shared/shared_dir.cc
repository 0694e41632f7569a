#include "core/shared/shared_dir.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>

#include "core/backing/backing_paths.h"
#include "core/backing/backing_store.h"
#include "core/shared/shared_policy.h"

namespace ckptfs {
namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW;

// Opens directory `name` of `dir`, made first if missing.
Result<int> OpenOrMakeDir(Env& env, int dir, const std::string& name) {
  Status made = env.Mkdir(dir, name, 0755);
  if (!made.ok() && made.err() != EEXIST) return made;
  return env.Open(dir, name, kDirFlags);
}

// Opens <backing>/.ckptfs/shared/`sub`, making the missing directories on the way.
Result<int> OpenSharedSubdir(Env& env, int backing_fd, const std::string& sub) {
  int dir = backing_fd;
  for (const char* name : {kReservedName, kSharedDirName, sub.c_str()}) {
    Result<int> next = OpenOrMakeDir(env, dir, name);
    if (dir != backing_fd) env.Close(dir);
    if (!next.ok()) {
      return Status::Error(next.status().err(),
                           "cannot open .ckptfs/shared/" + sub + " (" + next.status().message() +
                               ")");
    }
    dir = *next;
  }
  return dir;
}

bool IsPlainName(const std::string& name) {
  return !name.empty() && name != "." && name != ".." && name.find('/') == std::string::npos;
}

}  // namespace

Result<std::unique_ptr<SharedDirectory>> SharedDirectory::Open(Env& env, int backing_fd) {
  Result<int> members = OpenSharedSubdir(env, backing_fd, kMembersDirName);
  if (!members.ok()) return members.status();
  Result<int> commits = OpenSharedSubdir(env, backing_fd, kCommitsDirName);
  if (!commits.ok()) {
    env.Close(*members);
    return commits.status();
  }
  return std::unique_ptr<SharedDirectory>(new SharedDirectory(env, *members, *commits));
}

SharedDirectory::~SharedDirectory() {
  env_.Close(members_fd_);
  env_.Close(commits_fd_);
}

int SharedDirectory::TopFd(const std::string& top) const {
  if (top == kMembersDirName) return members_fd_;
  if (top == kCommitsDirName) return commits_fd_;
  return -1;
}

Result<std::pair<int, std::string>> SharedDirectory::Split(const std::string& dir) const {
  const size_t slash = dir.find('/');
  const int top = TopFd(dir.substr(0, slash));
  if (top < 0) return Status::Error(EINVAL, "no shared directory " + dir);
  if (slash == std::string::npos) return std::make_pair(top, std::string());
  std::string sub = dir.substr(slash + 1);
  if (!IsPlainName(sub)) return Status::Error(EINVAL, "no shared directory " + dir);
  return std::make_pair(top, std::move(sub));
}

Result<int> SharedDirectory::OpenDir(const std::string& dir) {
  Result<std::pair<int, std::string>> split = Split(dir);
  if (!split.ok()) return split.status();
  if (split->second.empty()) return split->first;
  return env_.Open(split->first, split->second, kDirFlags);
}

void SharedDirectory::Release(int fd) {
  if (fd != members_fd_ && fd != commits_fd_) env_.Close(fd);
}

Result<std::vector<std::string>> SharedDirectory::List(const std::string& dir) {
  Result<int> fd = OpenDir(dir);
  if (!fd.ok()) return fd.status();
  Result<std::vector<std::string>> names = env_.ListDir(*fd);
  Release(*fd);
  if (names.ok() && names->size() > policy::kMaxListedNames) {
    std::sort(names->begin(), names->end());
    names->resize(policy::kMaxListedNames);
  }
  return names;
}

Result<std::string> SharedDirectory::Read(const std::string& dir, const std::string& name,
                                          size_t max_bytes) {
  if (!IsPlainName(name)) return Status::Error(EINVAL, "no shared file " + name);
  Result<int> dir_fd = OpenDir(dir);
  if (!dir_fd.ok()) return dir_fd.status();
  Result<int> fd = env_.Open(*dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  Release(*dir_fd);
  if (!fd.ok()) {
    return fd.status().err() == ELOOP ? Status::Error(EINVAL, name + " is a symbolic link")
                                      : fd.status();
  }
  struct stat st {};
  Status stated = env_.Stat(*fd, "", &st);
  Result<std::string> out = std::string();
  if (!stated.ok()) {
    out = stated;
  } else if (!S_ISREG(st.st_mode)) {
    out = Status::Error(EINVAL, name + " is not a regular file");
  } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    out = Status::Error(EFBIG, name + " holds " + std::to_string(st.st_size) + " bytes");
  } else {
    std::string text(static_cast<size_t>(st.st_size), '\0');
    Status read = env_.Read(*fd, text.data(), text.size(), 0);
    out = read.ok() ? Result<std::string>(std::move(text)) : Result<std::string>(read);
  }
  env_.Close(*fd);
  return out;
}

Status SharedDirectory::Replace(const std::string& dir, const std::string& name,
                                const std::string& temp_name, const std::string& content) {
  if (!IsPlainName(name) || !IsPlainName(temp_name)) {
    return Status::Error(EINVAL, "no shared file " + name);
  }
  Result<int> dir_fd = OpenDir(dir);
  if (!dir_fd.ok()) return dir_fd.status();
  Result<int> fd =
      env_.Open(*dir_fd, temp_name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
  Status written = fd.status();
  if (fd.ok()) {
    written = env_.WriteAt(*fd, content.data(), content.size(), 0);
    env_.Close(*fd);
    if (written.ok()) written = env_.Rename(*dir_fd, temp_name, *dir_fd, name);
    if (!written.ok()) (void)env_.Unlink(*dir_fd, temp_name);
  }
  Release(*dir_fd);
  return written;
}

Status SharedDirectory::Remove(const std::string& dir, const std::string& name) {
  if (!IsPlainName(name)) return Status::Error(EINVAL, "no shared file " + name);
  Result<int> dir_fd = OpenDir(dir);
  if (!dir_fd.ok()) return dir_fd.status();
  Status removed = env_.Unlink(*dir_fd, name);
  Release(*dir_fd);
  return removed;
}

Status SharedDirectory::MakeDir(const std::string& dir) {
  Result<std::pair<int, std::string>> split = Split(dir);
  if (!split.ok()) return split.status();
  if (split->second.empty()) return Status::Error(EEXIST, dir + " exists");
  return env_.Mkdir(split->first, split->second, 0755);
}

Status SharedDirectory::RemoveDir(const std::string& dir) {
  Result<std::pair<int, std::string>> split = Split(dir);
  if (!split.ok()) return split.status();
  if (split->second.empty()) return Status::Error(EINVAL, "cannot remove " + dir);
  Result<int> fd = env_.Open(split->first, split->second, kDirFlags);
  if (!fd.ok()) return fd.status();
  Result<std::vector<std::string>> names = env_.ListDir(*fd);
  Status st = names.status();
  if (names.ok()) {
    for (const std::string& n : *names) {
      Status removed = env_.Unlink(*fd, n);
      if (!removed.ok() && removed.err() != ENOENT && st.ok()) st = removed;
    }
  }
  env_.Close(*fd);
  if (!st.ok()) return st;
  return env_.Unlink(split->first, split->second, /*directory=*/true);
}

}  // namespace ckptfs
