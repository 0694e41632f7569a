// Status and Result<T>: the one error type of ckptfs. A Status carries the exact errno that the
// FUSE adapter replies, and a message that names the file and the reason for logs and tools.
#pragma once

#include <cerrno>
#include <cstring>
#include <optional>
#include <string>
#include <utility>

namespace ckptfs {

class [[nodiscard]] Status {
 public:
  Status() = default;

  static Status Ok() { return Status(); }
  // `err` must be a positive errno value.
  static Status Error(int err, std::string message) { return Status(err, std::move(message)); }
  // Error from the current `errno`, with `what` as context (e.g. "openat foo").
  static Status FromErrno(std::string what) {
    int err = errno;
    return Status(err == 0 ? EIO : err, std::move(what));
  }

  bool ok() const { return err_ == 0; }
  int err() const { return err_; }
  const std::string& message() const { return message_; }
  // "message: strerror(err)", or "ok".
  std::string ToString() const {
    if (ok()) return "ok";
    return message_.empty() ? std::string(std::strerror(err_))
                            : message_ + ": " + std::strerror(err_);
  }

 private:
  Status(int err, std::string message) : err_(err), message_(std::move(message)) {}

  int err_ = 0;
  std::string message_;
};

// A value or the Status that explains why there is none.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : value_(std::move(value)) {}  // NOLINT(google-explicit-constructor)
  Result(Status status) : status_(std::move(status)) {}  // NOLINT(google-explicit-constructor)

  bool ok() const { return status_.ok(); }
  const Status& status() const { return status_; }
  T& value() & { return *value_; }
  const T& value() const& { return *value_; }
  T&& value() && { return std::move(*value_); }
  T* operator->() { return &*value_; }
  const T* operator->() const { return &*value_; }
  T& operator*() { return *value_; }
  const T& operator*() const { return *value_; }

 private:
  std::optional<T> value_;
  Status status_;
};

}  // namespace ckptfs
