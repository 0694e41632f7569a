// SharedStore: the shared area of -o shared on the object store of -o remote, under
// PREFIX/.ckptfs/shared/ (core/shared/shared_area.h), for nodes that share no filesystem. A file
// is an object: a PUT replaces it atomically (readers see the old object or the new one), a LIST
// with delimiter '/' names a directory's files and subdirectories, a DELETE removes one; the
// store has no directories, so MakeDir does nothing and nothing refuses a file put into a
// directory being removed (SharedCommits removes such leftovers).
//
// Each request is retried a little (kRequestRetries), then fails: the protocol's next poll tries
// again, so a member never stalls on an unreachable store for longer than a few requests.
//
// Thread-safe: one client, its requests serialised.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "core/remote/s3_client.h"
#include "core/shared/shared_area.h"

namespace ckptfs {

class SharedStore final : public SharedArea {
 public:
  // Retries of one request before it fails.
  static constexpr unsigned kRequestRetries = 2;

  // The area of the store `settings` names. ENOMEM when no client can be made.
  static Result<std::unique_ptr<SharedStore>> Make(const S3Settings& settings);

  Result<std::vector<std::string>> List(const std::string& dir) override EXCLUDES(mu_);
  Result<std::string> Read(const std::string& dir, const std::string& name,
                           size_t max_bytes) override EXCLUDES(mu_);
  Status Replace(const std::string& dir, const std::string& name, const std::string& temp_name,
                 const std::string& content) override EXCLUDES(mu_);
  Status Remove(const std::string& dir, const std::string& name) override EXCLUDES(mu_);
  Status MakeDir(const std::string& dir) override;
  Status RemoveDir(const std::string& dir) override EXCLUDES(mu_);

  // The key prefix of the area, "PREFIX/.ckptfs/shared/" (for messages and tests).
  const std::string& root() const { return root_; }

 private:
  SharedStore(std::unique_ptr<S3Client> client, std::string root)
      : root_(std::move(root)), client_(std::move(client)) {}
  Result<std::vector<std::string>> ListLocked(const std::string& dir, bool files_only)
      REQUIRES(mu_);

  const std::string root_;
  Mutex mu_;
  std::unique_ptr<S3Client> client_ GUARDED_BY(mu_);
};

}  // namespace ckptfs
