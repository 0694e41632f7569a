#include "core/shared/shared_dir.h"

#include <fcntl.h>
#include <sys/stat.h>

#include "core/backing/backing_store.h"

namespace ckptfs {
namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW;

// Opens directory `name` of `dir`, made first if missing.
Result<int> OpenOrMakeDir(Env& env, int dir, const std::string& name) {
  Status made = env.Mkdir(dir, name, 0755);
  if (!made.ok() && made.err() != EEXIST) return made;
  return env.Open(dir, name, kDirFlags);
}

}  // namespace

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

Result<std::string> ReadSmallFile(Env& env, int dir, const std::string& name, size_t max_bytes) {
  Result<int> fd = env.Open(dir, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  if (!fd.ok()) {
    return fd.status().err() == ELOOP ? Status::Error(EINVAL, name + " is a symbolic link")
                                      : fd.status();
  }
  struct stat st {};
  Status stated = env.Stat(*fd, "", &st);
  Result<std::string> out = std::string();
  if (!stated.ok()) {
    out = stated;
  } else if (!S_ISREG(st.st_mode)) {
    out = Status::Error(EINVAL, name + " is not a regular file");
  } else if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    out = Status::Error(EFBIG, name + " holds " + std::to_string(st.st_size) + " bytes");
  } else {
    std::string text(static_cast<size_t>(st.st_size), '\0');
    Status read = env.Read(*fd, text.data(), text.size(), 0);
    out = read.ok() ? Result<std::string>(std::move(text)) : Result<std::string>(read);
  }
  env.Close(*fd);
  return out;
}

Status ReplaceFile(Env& env, int dir, const std::string& name, const std::string& temp_name,
                   const std::string& content) {
  Result<int> fd = env.Open(dir, temp_name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0644);
  if (!fd.ok()) return fd.status();
  Status written = env.WriteAt(*fd, content.data(), content.size(), 0);
  env.Close(*fd);
  if (written.ok()) written = env.Rename(dir, temp_name, dir, name);
  if (!written.ok()) (void)env.Unlink(dir, temp_name);
  return written;
}

std::optional<nlohmann::json> ParseObject(const std::string& text) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

bool JsonString(const nlohmann::json& j, const char* key, size_t max_bytes, std::string* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string()) return false;
  const std::string& value = it->get_ref<const std::string&>();
  if (value.size() > max_bytes) return false;
  *out = value;
  return true;
}

bool JsonUnsigned(const nlohmann::json& j, const char* key, uint64_t* out) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number_unsigned()) return false;
  *out = it->get<uint64_t>();
  return true;
}

Status RemoveFlatDir(Env& env, int dir, const std::string& name) {
  Result<int> fd = env.Open(dir, name, kDirFlags);
  if (!fd.ok()) return fd.status();
  Result<std::vector<std::string>> names = env.ListDir(*fd);
  Status st = names.status();
  if (names.ok()) {
    for (const std::string& n : *names) {
      Status removed = env.Unlink(*fd, n);
      if (!removed.ok() && removed.err() != ENOENT && st.ok()) st = removed;
    }
  }
  env.Close(*fd);
  if (!st.ok()) return st;
  return env.Unlink(dir, name, /*directory=*/true);
}

}  // namespace ckptfs
