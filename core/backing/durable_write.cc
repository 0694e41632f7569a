#include "core/backing/durable_write.h"

#include <fcntl.h>

#include <span>

namespace ckptfs {

Status WriteFileDurably(Env& env, int staging_fd, const std::string& temp_name, int dir_fd,
                        const std::string& name, mode_t mode,
                        const std::function<Status(int fd)>& fill, DirSync dir_sync) {
  Result<int> file = env.Open(staging_fd, temp_name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW,
                              mode);
  if (!file.ok()) return file.status();
  const int fd = *file;
  Status st = fill(fd);
  if (st.ok()) st = env.Sync(std::span<const int>(&fd, 1), /*data_only=*/true).at(0);
  env.Close(fd);
  if (st.ok()) st = env.Rename(staging_fd, temp_name, dir_fd, name);
  if (!st.ok()) {
    (void)env.Unlink(staging_fd, temp_name);
    return st;
  }
  if (dir_sync == DirSync::kCallerSyncs) return Status::Ok();
  return env.Sync(std::span<const int>(&dir_fd, 1), /*data_only=*/false).at(0);
}

}  // namespace ckptfs
