// Who may replicate to whom: members of one group hold the same secret, read from a file only
// its owner (root, or the daemon's user) may read, and prove it to each other at connect time by
// a challenge and an HMAC-SHA256 (OpenSSL) over both nonces and the node names; neither side
// ever sends the secret. Constant-time comparison.
#pragma once

#include <string>
#include <string_view>

#include "core/base/status.h"
#include "core/replication/wire.h"

namespace ckptfs::replication {

// Bounds of a secret's length, in bytes (trailing white space of the file is not part of it).
inline constexpr size_t kMinSecretBytes = 16;
inline constexpr size_t kMaxSecretBytes = 4096;

class GroupSecret {
 public:
  // Reads the secret from `path`: ENOENT when missing; EPERM when it is not a regular file owned
  // by root or this process's user, or when its group or others may read or write it (the
  // message says to chmod 600); EINVAL when it holds fewer than kMinSecretBytes or more than
  // kMaxSecretBytes.
  static Result<GroupSecret> Load(const std::string& path);
  // A secret of these bytes (for tests); EINVAL under the same bounds.
  static Result<GroupSecret> FromBytes(std::string bytes);

  // The member's proof, for its Hello: over the partner's challenge, its own nonce and name.
  Mac MemberProof(const Nonce& challenge, const Nonce& member_nonce,
                  std::string_view member_node) const;
  // The partner's proof, for its Welcome: over both nonces and both names.
  Mac PartnerProof(const Nonce& challenge, const Nonce& member_nonce, std::string_view member_node,
                   std::string_view partner_node) const;

 private:
  explicit GroupSecret(std::string bytes) : bytes_(std::move(bytes)) {}
  Mac Hmac(const std::string& message) const;
  std::string bytes_;
};

// Whether `a` equals `b`, in time independent of where they differ.
bool SameMac(const Mac& a, const Mac& b);
// A nonce from OpenSSL's random generator.
Result<Nonce> RandomNonce();

}  // namespace ckptfs::replication
