#include "core/backing/backing_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <string>

#include "core/memory/file_content.h"

namespace ckptfs {
namespace {

// Whether files in directory `dir` take O_DIRECT writes aligned to kDirectAlign.
bool TakesDirectIo(Env& env, int dir) {
  constexpr const char* kProbe = "direct_io_probe";
  Result<int> fd = env.Open(dir, kProbe, O_CREAT | O_TRUNC | O_RDWR | O_DIRECT | O_NOFOLLOW, 0600);
  (void)env.Unlink(dir, kProbe);
  if (!fd.ok()) return false;
  void* page = std::aligned_alloc(kDirectAlign, kDirectAlign);
  std::memset(page, 0, kDirectAlign);
  bool ok = env.WriteAt(*fd, static_cast<const char*>(page), kDirectAlign, 0).ok();
  std::free(page);
  env.Close(*fd);
  return ok;
}

// Whether directory `dir` takes device nodes.
bool TakesDeviceNodes(Env& env, int dir) {
  constexpr const char* kProbe = "device_node_probe";
  (void)env.Unlink(dir, kProbe);
  if (!env.Mknod(dir, kProbe, S_IFCHR | 0600, makedev(1, 3)).ok()) return false;
  (void)env.Unlink(dir, kProbe);
  return true;
}

// Opens directory `name` of `dir`, made first if missing.
Result<int> OpenOwnDir(Env& env, int dir, const std::string& name) {
  Status made = env.Mkdir(dir, name, 0700);
  if (!made.ok() && made.err() != EEXIST) return made;
  return env.Open(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
}

}  // namespace

void RemoveStagingLeftovers(Env& env, int staging_fd, bool keep_for_takeover) {
  Result<std::vector<std::string>> left = env.ListDir(staging_fd);
  if (!left.ok()) return;
  size_t removed = 0;
  for (const std::string& name : *left) {
    if (keep_for_takeover &&
        (name.rfind(kHandoffPrefix, 0) == 0 || name.rfind(kSpillPrefix, 0) == 0)) {
      continue;
    }
    removed += env.Unlink(staging_fd, name).ok();
  }
  if (removed > 0) spdlog::info("removed {} unfinished staged files of an earlier run", removed);
}

void RemoveSpillFiles(Env& env, int staging_fd,
                      const std::function<bool(const std::string&)>& keep) {
  Result<std::vector<std::string>> left = env.ListDir(staging_fd);
  if (!left.ok()) return;
  for (const std::string& name : *left) {
    if (name.rfind(kSpillPrefix, 0) == 0 && !(keep && keep(name))) {
      (void)env.Unlink(staging_fd, name);
    }
  }
}

Result<int> OpenBackingDirectory(Env& env, const std::string& path) {
  Result<int> root = env.Open(AT_FDCWD, path, O_RDONLY | O_DIRECTORY);
  if (!root.ok()) {
    int err = root.status().err();
    if (err == ENOTDIR) {
      return Status::Error(err, "backing directory " + path + " is not a directory");
    }
    return Status::Error(err, "cannot open backing directory " + path);
  }
  if (faccessat(*root, ".", W_OK | X_OK, AT_EACCESS) != 0) {
    Status st = Status::Error(errno, "backing directory " + path + " is not writable");
    env.Close(*root);
    return st;
  }
  return root;
}

Result<BackingStore> OpenBackingStore(Env& env, const Config& config) {
  const std::string& path = config.backing_dir;
  Result<int> root = OpenBackingDirectory(env, path);
  if (!root.ok()) return root.status();
  auto fail = [&](const Status& why, const std::string& what) {
    env.Close(*root);
    return Status::Error(why.err(), what + " in backing directory " + path);
  };
  Result<int> own = OpenOwnDir(env, *root, kReservedName);
  if (!own.ok()) return fail(own.status(), "cannot create .ckptfs");
  Result<int> staging = OpenOwnDir(env, *own, kStagingDirName);
  env.Close(*own);
  if (!staging.ok()) return fail(staging.status(), "cannot create .ckptfs/staging");
  if (config.shared) {
    // Each member stages in its own directory; its leftovers are its own to drop, once joined.
    Result<int> mine = OpenOwnDir(env, *staging, config.node);
    env.Close(*staging);
    if (!mine.ok()) return fail(mine.status(), "cannot create .ckptfs/staging/" + config.node);
    staging = mine;
  } else {
    RemoveStagingLeftovers(env, *staging, TakesOverStagedFiles(config));
  }
  BackingStore store{*root, *staging, config.flush_io, TakesDeviceNodes(env, *staging)};
  if (config.flush_io != FlushIo::kBuffered && !TakesDirectIo(env, *staging)) {
    if (config.flush_io == FlushIo::kDirect) {
      env.Close(*staging);
      env.Close(*root);
      return Status::Error(EINVAL, "flush_io=direct: the backing filesystem of " + path +
                                       " does not take O_DIRECT writes");
    }
    spdlog::info(
        "the backing filesystem does not take O_DIRECT writes: flushing through its page cache");
    store.flush_io = FlushIo::kBuffered;
  }
  return store;
}

}  // namespace ckptfs
