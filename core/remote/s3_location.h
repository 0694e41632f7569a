// S3Location: where the remote tier keeps a mount's files, parsed from
// `-o remote=s3://BUCKET/PREFIX` (untrusted text: bounded, checked against S3's bucket naming
// rules), and the object key of a path under the mount.
#pragma once

#include <string>
#include <string_view>

#include "core/base/status.h"

namespace ckptfs {

struct S3Location {
  std::string bucket;
  std::string prefix;  // Without leading or trailing '/'; may be empty.

  // "s3://BUCKET/PREFIX". EINVAL naming what is wrong: not s3://, a bucket name S3 refuses
  // (3-63 of a-z 0-9 . -, starting and ending with a letter or digit), a prefix over 512 bytes,
  // with control characters, or with an empty, "." or ".." component.
  static Result<S3Location> Parse(std::string_view text);

  // The key of `path` (relative to the mount root, without a leading '/').
  std::string KeyOf(std::string_view path) const;
  std::string ToString() const;
};

}  // namespace ckptfs
