#include "fs/proc_files.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cctype>

namespace ckptfs {
namespace {

// /proc/PID/status is about 1.5 KiB.
constexpr size_t kMaxProcText = 16 << 10;

// The digits of field `key` of a status text (after "key:" and blanks), up to the line's end.
std::optional<std::string_view> FieldText(std::string_view status, std::string_view key) {
  size_t at = 0;
  while (at < status.size()) {
    const size_t end = std::min(status.find('\n', at), status.size());
    std::string_view line = status.substr(at, end - at);
    at = end + 1;
    if (line.size() <= key.size() || line.substr(0, key.size()) != key ||
        line[key.size()] != ':') {
      continue;
    }
    line.remove_prefix(key.size() + 1);
    while (!line.empty() && (line.front() == ' ' || line.front() == '\t')) line.remove_prefix(1);
    return line;
  }
  return std::nullopt;
}

// The number at the start of `text` in `base` (10 or 16); nullopt when there is none or it
// overflows.
std::optional<uint64_t> LeadingNumber(std::string_view text, unsigned base) {
  uint64_t value = 0;
  size_t digits = 0;
  for (char ch : text) {
    const int c = std::tolower(static_cast<unsigned char>(ch));
    unsigned digit;
    if (c >= '0' && c <= '9') {
      digit = static_cast<unsigned>(c - '0');
    } else if (base == 16 && c >= 'a' && c <= 'f') {
      digit = static_cast<unsigned>(c - 'a' + 10);
    } else {
      break;
    }
    if (value > (UINT64_MAX - digit) / base) return std::nullopt;
    value = value * base + digit;
    ++digits;
  }
  if (digits == 0) return std::nullopt;
  return value;
}

}  // namespace

std::optional<std::string> ReadProcFile(pid_t pid, const char* name) {
  const std::string path = "/proc/" + std::to_string(pid) + "/" + name;
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  std::string text(kMaxProcText, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = read(fd, text.data() + got, text.size() - got);
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  close(fd);
  text.resize(got);
  return text;
}

std::optional<std::string> ProcExecutable(pid_t pid) {
  const std::string link = "/proc/" + std::to_string(pid) + "/exe";
  std::array<char, 4096> target;
  const ssize_t n = readlink(link.c_str(), target.data(), target.size());
  if (n <= 0 || static_cast<size_t>(n) == target.size()) return std::nullopt;
  return std::string(target.data(), static_cast<size_t>(n));
}

std::optional<uint64_t> ProcStatusField(std::string_view status, std::string_view key) {
  const std::optional<std::string_view> text = FieldText(status, key);
  return text ? LeadingNumber(*text, 10) : std::nullopt;
}

std::optional<uint64_t> ProcStatusMask(std::string_view status, std::string_view key) {
  const std::optional<std::string_view> text = FieldText(status, key);
  return text ? LeadingNumber(*text, 16) : std::nullopt;
}

}  // namespace ckptfs
