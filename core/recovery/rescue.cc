#include "core/recovery/rescue.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <ctime>
#include <set>

#include "core/backing/backing_store.h"

namespace ckptfs {
namespace {

// Creates every directory of `rel` below `root_fd`; returns the fd of the last one.
Result<int> MakeDirs(Env& env, int root_fd, const std::string& rel) {
  int fd = dup(root_fd);
  if (fd < 0) return Status::FromErrno("dup");
  size_t pos = 0;
  while (pos < rel.size()) {
    size_t slash = rel.find('/', pos);
    std::string part = rel.substr(pos, slash == std::string::npos ? std::string::npos : slash - pos);
    pos = slash == std::string::npos ? rel.size() : slash + 1;
    if (part.empty()) continue;
    (void)env.Mkdir(fd, part, 0700);
    Result<int> next = env.Open(fd, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    env.Close(fd);
    if (!next.ok()) return next.status();
    fd = *next;
  }
  return fd;
}

// Removes what a rescue that failed wrote under `rel` of `base_fd`: the `files` (paths below
// `rel`), the directories holding them, and `rel` itself, so that no incomplete copy is left
// where a user would look for one.
void RemoveIncompleteRescue(Env& env, int base_fd, const std::string& rel,
                            const std::vector<UnflushedFile>& files) {
  std::set<std::string> dirs;
  for (const UnflushedFile& file : files) {
    (void)env.Unlink(base_fd, rel + "/" + file.path);
    for (size_t slash = file.path.find('/'); slash != std::string::npos;
         slash = file.path.find('/', slash + 1)) {
      dirs.insert(file.path.substr(0, slash));
    }
  }
  // Deepest first: a directory's subdirectories sort after it.
  for (auto it = dirs.rbegin(); it != dirs.rend(); ++it) {
    (void)env.Unlink(base_fd, rel + "/" + *it, /*directory=*/true);
  }
  (void)env.Unlink(base_fd, rel, /*directory=*/true);
}

// Writes `content` to `fd` and makes it durable (the flusher has stopped: this thread owns the
// Env's syncs).
Status WriteAll(Env& env, int fd, const FileContent& content) {
  if (Status st = WriteContentTo(env, fd, content); !st.ok()) return st;
  return env.Sync(std::vector<int>{fd}, /*data_only=*/false).front();
}

}  // namespace

Result<std::string> SaveToRescueDirectory(Env& env, int root_fd, const std::string& backing_dir,
                                          const std::vector<UnflushedFile>& files) {
  char stamp[32];
  time_t t = time(nullptr);
  strftime(stamp, sizeof stamp, "%Y%m%d-%H%M%S", localtime(&t));
  std::string name = std::string(kRescuePrefix) + stamp + "-" + std::to_string(getpid());
  // The backing directory first; when it cannot hold the files (full, failing), /var/tmp.
  struct Place {
    int base_fd;
    std::string rel;
    std::string shown;
  };
  Result<int> var_tmp = env.Open(AT_FDCWD, "/var/tmp", O_RDONLY | O_DIRECTORY);
  const Place places[] = {
      {root_fd, std::string(kReservedName) + "/" + name,
       backing_dir + "/" + kReservedName + "/" + name},
      {var_tmp.ok() ? *var_tmp : -1, "ckptfs-" + name, "/var/tmp/ckptfs-" + name}};
  Status result;
  for (const Place& place : places) {
    Result<int> dfd =
        place.base_fd < 0 ? var_tmp.status() : MakeDirs(env, place.base_fd, place.rel);
    if (!dfd.ok()) {
      result = Status::Error(dfd.status().err(), "create rescue directory " + place.shown);
      continue;
    }
    result = Status::Ok();
    for (const UnflushedFile& file : files) {
      const std::string& path = file.path;
      size_t slash = path.rfind('/');
      Result<int> parent =
          MakeDirs(env, *dfd, slash == std::string::npos ? "" : path.substr(0, slash));
      std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
      Result<int> fd =
          parent.ok() ? env.Open(*parent, base, O_CREAT | O_WRONLY | O_TRUNC | O_NOFOLLOW, 0600)
                      : parent;
      Status st = fd.ok() ? WriteAll(env, *fd, file.content)
                          : Status::Error(fd.status().err(), "create " + path);
      if (fd.ok()) env.Close(*fd);
      if (parent.ok()) env.Close(*parent);
      if (!st.ok() && result.ok()) result = Status::Error(st.err(), place.shown + ": " + st.ToString());
    }
    if (result.ok()) {
      Status synced = env.Sync(std::vector<int>{*dfd}, /*data_only=*/false).front();
      if (!synced.ok()) result = Status::Error(synced.err(), "fsync " + place.shown);
    }
    env.Close(*dfd);
    if (result.ok()) {
      if (var_tmp.ok()) env.Close(*var_tmp);
      return place.shown;
    }
    spdlog::warn("cannot rescue the unflushed files to {}: {}; removed what was written there",
                 place.shown, result.ToString());
    RemoveIncompleteRescue(env, place.base_fd, place.rel, files);
  }
  if (var_tmp.ok()) env.Close(*var_tmp);
  return result;
}

}  // namespace ckptfs
