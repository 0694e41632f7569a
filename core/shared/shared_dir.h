// SharedDirectory: the shared area of -o shared over one shared backing directory,
// <backing>/.ckptfs/shared (core/shared/shared_area.h). Reads never follow symbolic links; a file
// is replaced by writing its temporary name, then renaming it over the name.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/shared/shared_area.h"
#include "iouring/env.h"

namespace ckptfs {

class SharedDirectory final : public SharedArea {
 public:
  // Opens <backing>/.ckptfs/shared/members and commits, making the missing directories on the
  // way. `env` and `backing_fd` must outlive it.
  static Result<std::unique_ptr<SharedDirectory>> Open(Env& env, int backing_fd);
  ~SharedDirectory() override;
  SharedDirectory(const SharedDirectory&) = delete;
  SharedDirectory& operator=(const SharedDirectory&) = delete;

  Result<std::vector<std::string>> List(const std::string& dir) override;
  Result<std::string> Read(const std::string& dir, const std::string& name,
                           size_t max_bytes) override;
  Status Replace(const std::string& dir, const std::string& name, const std::string& temp_name,
                 const std::string& content) override;
  Status Remove(const std::string& dir, const std::string& name) override;
  Status MakeDir(const std::string& dir) override;
  Status RemoveDir(const std::string& dir) override;

 private:
  SharedDirectory(Env& env, int members_fd, int commits_fd)
      : env_(env), members_fd_(members_fd), commits_fd_(commits_fd) {}
  // Opens `dir`; the caller hands the descriptor to Release.
  Result<int> OpenDir(const std::string& dir);
  // The top directory `top` names ("members", "commits"), or -1.
  int TopFd(const std::string& top) const;
  // Closes `fd` unless it is a top directory's.
  void Release(int fd);
  // Splits `dir` into its top directory's descriptor and the name under it ("" for the top).
  Result<std::pair<int, std::string>> Split(const std::string& dir) const;

  Env& env_;
  const int members_fd_;
  const int commits_fd_;
};

}  // namespace ckptfs
