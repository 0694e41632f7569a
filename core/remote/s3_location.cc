#include "core/remote/s3_location.h"

namespace ckptfs {
namespace {

constexpr size_t kMaxPrefix = 512;

bool IsLowerAlnum(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); }

Status Bad(const std::string& why) { return Status::Error(EINVAL, "remote: " + why); }

}  // namespace

Result<S3Location> S3Location::Parse(std::string_view text) {
  constexpr std::string_view kScheme = "s3://";
  if (text.substr(0, kScheme.size()) != kScheme) return Bad("expected s3://BUCKET[/PREFIX]");
  text.remove_prefix(kScheme.size());
  const size_t slash = text.find('/');
  const std::string_view bucket = text.substr(0, slash);
  std::string_view prefix = slash == std::string_view::npos ? "" : text.substr(slash + 1);
  if (bucket.size() < 3 || bucket.size() > 63) return Bad("a bucket name has 3 to 63 characters");
  for (char c : bucket) {
    if (!IsLowerAlnum(c) && c != '.' && c != '-') {
      return Bad("a bucket name has only a-z, 0-9, '.' and '-'");
    }
  }
  if (!IsLowerAlnum(bucket.front()) || !IsLowerAlnum(bucket.back())) {
    return Bad("a bucket name starts and ends with a letter or a digit");
  }
  while (!prefix.empty() && prefix.back() == '/') prefix.remove_suffix(1);
  if (prefix.size() > kMaxPrefix) return Bad("the prefix is longer than 512 bytes");
  size_t start = 0;
  while (start < prefix.size()) {
    size_t end = prefix.find('/', start);
    if (end == std::string_view::npos) end = prefix.size();
    const std::string_view part = prefix.substr(start, end - start);
    if (part.empty() || part == "." || part == "..") {
      return Bad("the prefix has an empty, '.' or '..' component");
    }
    start = end + 1;
  }
  for (unsigned char c : prefix) {
    if (c < 0x20 || c == 0x7f) return Bad("the prefix has a control character");
  }
  return S3Location{std::string(bucket), std::string(prefix)};
}

std::string S3Location::KeyOf(std::string_view path) const {
  if (prefix.empty()) return std::string(path);
  return prefix + "/" + std::string(path);
}

std::string S3Location::ToString() const {
  return "s3://" + bucket + (prefix.empty() ? "" : "/" + prefix);
}

}  // namespace ckptfs
