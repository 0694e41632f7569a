#include "core/remote/upload_log.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstring>

#include "core/memory/crc32c.h"

namespace ckptfs {
namespace {

constexpr std::string_view kHeader = "ckptfs upload log 1\n";
constexpr size_t kMaxPath = 4096;

uint32_t CrcOf(std::string_view bytes) {
  Crc32c crc;
  crc.Update(bytes.data(), bytes.size());
  return crc.value();
}

std::string Sealed(std::string body) {
  char crc[16];
  std::snprintf(crc, sizeof crc, " %08x\n", CrcOf(body));
  return body + crc;
}

std::string PathField(const std::string& path) {
  return std::to_string(path.size()) + ":" + path;
}

// Reads a record at the front of `in`, advancing it; false when it is torn or wrong.
class RecordReader {
 public:
  explicit RecordReader(std::string_view in) : in_(in) {}
  size_t used() const { return at_; }

  bool Char(char c) {
    if (at_ >= in_.size() || in_[at_] != c) return false;
    ++at_;
    return true;
  }
  template <typename T>
  bool Number(T* out) {
    const char* begin = in_.data() + at_;
    auto [end, ec] = std::from_chars(begin, in_.data() + in_.size(), *out);
    if (ec != std::errc() || end == begin) return false;
    at_ += static_cast<size_t>(end - begin);
    return true;
  }
  bool Path(std::string* out) {
    size_t len = 0;
    if (!Number(&len) || len > kMaxPath || !Char(':') || in_.size() - at_ < len) return false;
    out->assign(in_.substr(at_, len));
    at_ += len;
    return true;
  }
  // The " CRC\n" ending the record, checked against what came before it.
  bool Crc() {
    const size_t body = at_;
    if (!Char(' ') || in_.size() - at_ < 9 || in_[at_ + 8] != '\n') return false;
    uint32_t crc = 0;
    auto [end, ec] = std::from_chars(in_.data() + at_, in_.data() + at_ + 8, crc, 16);
    if (ec != std::errc() || end != in_.data() + at_ + 8) return false;
    at_ += 9;
    return crc == CrcOf(in_.substr(0, body));
  }

 private:
  std::string_view in_;
  size_t at_ = 0;
};

Result<std::string> ReadBounded(int fd) {
  struct stat st {};
  if (fstat(fd, &st) != 0) return Status::FromErrno("the upload log");
  if (static_cast<uint64_t>(st.st_size) > kMaxUploadLogBytes) {
    return Status::Error(EFBIG, "the upload log is larger than 64 MiB");
  }
  std::string bytes(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < bytes.size()) {
    const ssize_t n = pread(fd, bytes.data() + got, bytes.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("reading the upload log");
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  bytes.resize(got);
  return bytes;
}

Status WriteAll(int fd, std::string_view bytes) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::FromErrno("writing the upload log");
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

}  // namespace

std::string_view UploadLogHeader() { return kHeader; }

std::string EncodeHandedOver(const policy::LoggedUploads::Version& v) {
  if (v.removal) return Sealed("R " + PathField(v.path));
  if (!v.move_to.empty()) return Sealed("M " + PathField(v.path) + " " + PathField(v.move_to));
  const std::string fields = std::to_string(v.inode) + " " + std::to_string(v.size) + " " +
                             std::to_string(v.mtime_ns) + " " + PathField(v.path);
  if (!v.copy_from.empty()) return Sealed("C " + fields + " " + PathField(v.copy_from));
  return Sealed("U " + fields);
}

std::string EncodeDone(uint64_t count) { return Sealed("D " + std::to_string(count)); }

std::string EncodeGivenUp(uint64_t index, const policy::LoggedUploads::Version::GivenUp& then) {
  return Sealed("X " + std::to_string(index) + " " + std::to_string(then.size) + " " +
                std::to_string(then.mtime_ns));
}

Result<policy::LoggedUploads> DecodeUploadLog(std::string_view bytes, bool* torn) {
  *torn = false;
  if (bytes.size() > kMaxUploadLogBytes) {
    return Status::Error(EINVAL, "the upload log is larger than 64 MiB");
  }
  if (bytes.substr(0, kHeader.size()) != kHeader) {
    return Status::Error(EINVAL, "not an upload log of this version (no header)");
  }
  bytes.remove_prefix(kHeader.size());
  policy::LoggedUploads log;
  while (!bytes.empty()) {
    RecordReader r(bytes);
    policy::LoggedUploads::Version v;
    bool ok = false;
    const bool copy = !bytes.empty() && bytes.front() == 'C';
    if (r.Char('U') || r.Char('C')) {
      ok = r.Char(' ') && r.Number(&v.inode) && r.Char(' ') && r.Number(&v.size) && r.Char(' ') &&
           r.Number(&v.mtime_ns) && r.Char(' ') && r.Path(&v.path) &&
           (!copy || (r.Char(' ') && r.Path(&v.copy_from) && !v.copy_from.empty())) && r.Crc();
      if (ok) log.handed_over.push_back(std::move(v));
    } else if (r.Char('X')) {
      uint64_t index = 0;
      policy::LoggedUploads::Version::GivenUp then;
      ok = r.Char(' ') && r.Number(&index) && r.Char(' ') && r.Number(&then.size) &&
           r.Char(' ') && r.Number(&then.mtime_ns) && r.Crc() && index < log.handed_over.size();
      if (ok) log.handed_over[index].given_up = then;
    } else if (r.Char('M')) {
      ok = r.Char(' ') && r.Path(&v.path) && r.Char(' ') && r.Path(&v.move_to) &&
           !v.move_to.empty() && r.Crc();
      if (ok) log.handed_over.push_back(std::move(v));
    } else if (r.Char('R')) {
      v.removal = true;
      ok = r.Char(' ') && r.Path(&v.path) && r.Crc();
      if (ok) log.handed_over.push_back(std::move(v));
    } else if (r.Char('D')) {
      uint64_t count = 0;
      ok = r.Char(' ') && r.Number(&count) && r.Crc();
      // A count beyond what was handed over is not one this code wrote.
      ok = ok && count <= log.handed_over.size();
      if (ok) log.done = std::max(log.done, count);
    }
    if (!ok) {
      *torn = true;
      break;
    }
    bytes.remove_prefix(r.used());
  }
  return log;
}

Result<std::unique_ptr<UploadLog>> UploadLog::Open(int dir_fd, const std::string& name,
                                                   policy::LoggedUploads* held) {
  *held = {};
  const int fd = openat(dir_fd, name.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW,
                        0600);
  if (fd < 0) return Status::FromErrno("the upload log " + name);
  std::unique_ptr<UploadLog> log(new UploadLog(dir_fd, name, fd));
  Result<std::string> bytes = ReadBounded(fd);
  if (!bytes.ok()) {
    spdlog::error("remote: {}: what it names is not resumed", bytes.status().ToString());
    return log;
  }
  if (bytes->empty()) return log;
  bool torn = false;
  Result<policy::LoggedUploads> decoded = DecodeUploadLog(*bytes, &torn);
  if (!decoded.ok()) {
    spdlog::error("remote: the upload log {}: {}: what it names is not resumed", name,
                  decoded.status().message());
    return log;
  }
  if (torn) spdlog::warn("remote: the upload log {} ends in a torn record: it is left out", name);
  *held = std::move(*decoded);
  return log;
}

UploadLog::UploadLog(int dir_fd, std::string name, int fd)
    : dir_fd_(dir_fd), name_(std::move(name)), fd_(fd) {}

UploadLog::~UploadLog() { close(fd_); }

Status UploadLog::Rewrite(const std::vector<policy::LoggedUploads::Version>& pending) {
  const std::string tmp = name_ + ".new";
  const int fd =
      openat(dir_fd_, tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return Status::FromErrno("the upload log " + tmp);
  std::string bytes(kHeader);
  for (size_t i = 0; i < pending.size(); ++i) {
    bytes += EncodeHandedOver(pending[i]);
    if (pending[i].given_up) bytes += EncodeGivenUp(i, *pending[i].given_up);
  }
  Status st = WriteAll(fd, bytes);
  if (st.ok() && fdatasync(fd) != 0) st = Status::FromErrno("syncing the upload log");
  if (st.ok() && renameat(dir_fd_, tmp.c_str(), dir_fd_, name_.c_str()) != 0) {
    st = Status::FromErrno("renaming the upload log");
  }
  if (st.ok() && fsync(dir_fd_) != 0) st = Status::FromErrno("syncing the upload log's directory");
  if (!st.ok()) {
    close(fd);
    (void)unlinkat(dir_fd_, tmp.c_str(), 0);
    return st;
  }
  close(fd_);
  fd_ = fd;
  return Status::Ok();
}

void UploadLog::AppendLocked(const std::string& record) {
  if (Status st = WriteAll(fd_, record); !st.ok() && write_error_.ok()) write_error_ = st;
}

void UploadLog::HandedOver(const policy::LoggedUploads::Version& version) {
  MutexLock lock(mu_);
  AppendLocked(EncodeHandedOver(version));
}

void UploadLog::GivenUp(uint64_t index, const policy::LoggedUploads::Version::GivenUp& then) {
  MutexLock lock(mu_);
  AppendLocked(EncodeGivenUp(index, then));
}

void UploadLog::Done(uint64_t count) {
  MutexLock lock(mu_);
  AppendLocked(EncodeDone(count));
}

void UploadLog::Empty() {
  MutexLock lock(mu_);
  if (ftruncate(fd_, 0) != 0) {
    if (write_error_.ok()) write_error_ = Status::FromErrno("emptying the upload log");
    return;
  }
  AppendLocked(std::string(kHeader));
}

void UploadLog::Remove() {
  MutexLock lock(mu_);
  if (unlinkat(dir_fd_, name_.c_str(), 0) != 0 && errno != ENOENT) {
    spdlog::warn("remote: cannot remove the upload log {} ({}): the next mount finds it empty",
                 name_, std::strerror(errno));
  }
}

Status UploadLog::Sync() {
  Status failed;
  {
    MutexLock lock(mu_);
    failed = write_error_;
    write_error_ = Status::Ok();
  }
  if (fdatasync(fd_) != 0 && failed.ok()) failed = Status::FromErrno("syncing the upload log");
  return failed;
}

}  // namespace ckptfs
