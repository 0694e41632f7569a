#include "core/replication/member_auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

namespace ckptfs::replication {
namespace {

std::string Part(std::string_view s) {
  // Length-prefixed, so that no two different field lists make the same message.
  return std::to_string(s.size()) + ":" + std::string(s);
}
std::string Part(const Nonce& n) {
  return Part(std::string_view(reinterpret_cast<const char*>(n.data()), n.size()));
}

}  // namespace

Result<GroupSecret> GroupSecret::FromBytes(std::string bytes) {
  while (!bytes.empty() && (bytes.back() == '\n' || bytes.back() == '\r' || bytes.back() == ' ' ||
                            bytes.back() == '\t')) {
    bytes.pop_back();
  }
  if (bytes.size() < kMinSecretBytes || bytes.size() > kMaxSecretBytes) {
    return Status::Error(EINVAL, "the replication secret must hold " +
                                     std::to_string(kMinSecretBytes) + " to " +
                                     std::to_string(kMaxSecretBytes) + " bytes, not " +
                                     std::to_string(bytes.size()));
  }
  return GroupSecret(std::move(bytes));
}

Result<GroupSecret> GroupSecret::Load(const std::string& path) {
  int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    if (errno == ELOOP) return Status::Error(EPERM, path + " is a symbolic link");
    return Status::FromErrno("cannot open the replication secret " + path);
  }
  struct stat st {};
  Result<GroupSecret> out = Status::Error(EINVAL, path);
  if (fstat(fd, &st) != 0) {
    out = Status::FromErrno(path);
  } else if (!S_ISREG(st.st_mode)) {
    out = Status::Error(EPERM, path + " is not a regular file");
  } else if (st.st_uid != 0 && st.st_uid != geteuid()) {
    out = Status::Error(EPERM, path + " must be owned by root or by the daemon's user");
  } else if ((st.st_mode & 077) != 0) {
    out = Status::Error(EPERM, path + " may be read or written by others than its owner: "
                                      "chmod 600 it");
  } else if (static_cast<uint64_t>(st.st_size) > kMaxSecretBytes + 64) {
    out = Status::Error(EINVAL, path + " is too large for a replication secret");
  } else {
    std::string bytes(static_cast<size_t>(st.st_size), '\0');
    ssize_t n = pread(fd, bytes.data(), bytes.size(), 0);
    if (n < 0) {
      out = Status::FromErrno(path);
    } else {
      bytes.resize(static_cast<size_t>(n));
      out = FromBytes(std::move(bytes));
    }
  }
  close(fd);
  return out;
}

Mac GroupSecret::Hmac(const std::string& message) const {
  Mac mac{};
  unsigned int len = 0;
  HMAC(EVP_sha256(), bytes_.data(), static_cast<int>(bytes_.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), mac.data(), &len);
  return mac;
}

Mac GroupSecret::MemberProof(const Nonce& challenge, const Nonce& member_nonce,
                             std::string_view member_node) const {
  return Hmac("ckptfs replication member|" + Part(challenge) + Part(member_nonce) +
              Part(member_node));
}

Mac GroupSecret::PartnerProof(const Nonce& challenge, const Nonce& member_nonce,
                              std::string_view member_node, std::string_view partner_node) const {
  return Hmac("ckptfs replication partner|" + Part(challenge) + Part(member_nonce) +
              Part(member_node) + Part(partner_node));
}

bool SameMac(const Mac& a, const Mac& b) { return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0; }

Result<Nonce> RandomNonce() {
  Nonce n{};
  if (RAND_bytes(n.data(), static_cast<int>(n.size())) != 1) {
    return Status::Error(EIO, "OpenSSL could not make a random nonce");
  }
  return n;
}

}  // namespace ckptfs::replication
