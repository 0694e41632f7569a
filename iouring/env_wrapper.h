// EnvWrapper: an Env that forwards every call to another Env it owns (leveldb's EnvWrapper), so
// that a wrapper overrides only what it changes. Each single call (every call but Write, Sync and
// Name) first asks BeforeCall, the one place a wrapper judges a call by its Op and names.
//
// Thread model: as the wrapped Env's; BeforeCall may be called from any thread at once.
#pragma once

#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/base/status.h"
#include "iouring/env.h"

namespace ckptfs {

class EnvWrapper : public Env {
 public:
  explicit EnvWrapper(std::unique_ptr<Env> target) : target_(std::move(target)) {}

  EnvWrapper(const EnvWrapper&) = delete;
  EnvWrapper& operator=(const EnvWrapper&) = delete;

  std::string Name() const override { return target_->Name(); }
  std::vector<Status> Write(std::span<const WriteRequest> requests) override {
    return target_->Write(requests);
  }
  std::vector<Status> Sync(std::span<const int> fds, bool data_only) override {
    return target_->Sync(fds, data_only);
  }
  // BeforeCall(kRead) for each request; those it fails are not forwarded.
  std::vector<Status> ReadBatch(std::span<const ReadBatchRequest> requests) override;

  Result<int> Open(int dir, const std::string& name, int flags, mode_t mode) override;
  // Cannot fail: forwarded whatever BeforeCall says.
  void Close(int fd) override;
  Status Stat(int dir, const std::string& name, struct stat* st) override;
  Status StatFs(int fd, struct statvfs* st) override;
  Result<std::string> ReadLink(int dir, const std::string& name) override;
  Result<std::vector<std::string>> ListDir(int dir) override;
  Status Read(int fd, char* dst, size_t length, uint64_t offset) override;
  Status WriteAt(int fd, const char* src, size_t length, uint64_t offset) override;
  Status Copy(int from, int to, uint64_t length) override;
  Status Truncate(int fd, uint64_t size) override;
  Status Allocate(int fd, uint64_t offset, uint64_t length) override;
  // A hint that cannot fail: forwarded whatever BeforeCall says.
  void Advise(int fd, uint64_t offset, uint64_t length) override;
  Status SyncFs(int fd) override;
  Status Mkdir(int dir, const std::string& name, mode_t mode) override;
  Status Mknod(int dir, const std::string& name, mode_t mode, dev_t dev) override;
  Status Symlink(const std::string& target, int dir, const std::string& name) override;
  Status Link(int dir, const std::string& name, int new_dir, const std::string& new_name) override;
  Status Rename(int dir, const std::string& name, int new_dir, const std::string& new_name,
                unsigned flags) override;
  Status Unlink(int dir, const std::string& name, bool directory) override;
  Status Chmod(int dir, const std::string& name, mode_t mode) override;
  Status Chown(int dir, const std::string& name, uid_t uid, gid_t gid) override;
  Status SetTimes(int dir, const std::string& name, const timespec times[2]) override;
  Status SetXattr(int fd, const std::string& name, const std::string& value) override;
  Result<std::string> GetXattr(int fd, const std::string& name, size_t max_size) override;

 protected:
  // Called before each single call of `op` on `names` (its name, both names of a rename or a
  // link, none for calls on descriptors) is forwarded. A failure is returned instead of
  // forwarding the call, which then does not reach the wrapped Env. The default lets every call
  // through.
  virtual Status BeforeCall(Op op, std::initializer_list<std::string_view> names) {
    return Status::Ok();
  }

  Env& target() const { return *target_; }

 private:
  // Asks BeforeCall, then runs `forward` unless it failed the call.
  template <typename Forward>
  auto Forwarded(Op op, std::initializer_list<std::string_view> names, Forward forward)
      -> decltype(forward());

  const std::unique_ptr<Env> target_;
};

}  // namespace ckptfs
