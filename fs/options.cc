#include "fs/options.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <sstream>

namespace ckptfs {
namespace {

// libfuse mount options that ckptfs passes through unchanged.
const char* const kFuseFlags[] = {"allow_other", "allow_root", "auto_unmount",
                                  "default_permissions", "ro", "rw", "dev", "nodev", "suid",
                                  "nosuid", "exec", "noexec", "atime", "noatime", "relatime"};
const char* const kFuseValued[] = {"fsname", "subtype"};

Status Bad(const std::string& option, const std::string& why) {
  return Status::Error(EINVAL, "bad option '" + option + "': " + why);
}

}  // namespace

Result<uint64_t> ParseSize(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == 0 || pos > 19) return Status::Error(EINVAL, "not a size");
  uint64_t value = std::stoull(text.substr(0, pos));
  std::string suffix = text.substr(pos);
  std::transform(suffix.begin(), suffix.end(), suffix.begin(),
                 [](unsigned char c) { return std::toupper(c); });
  if (suffix.size() > 1 && (suffix.substr(1) == "IB" || suffix.substr(1) == "B")) {
    suffix = suffix.substr(0, 1);
  }
  unsigned shift = 0;
  if (suffix.empty() || suffix == "B") {
    shift = 0;
  } else if (suffix == "K") {
    shift = 10;
  } else if (suffix == "M") {
    shift = 20;
  } else if (suffix == "G") {
    shift = 30;
  } else if (suffix == "T") {
    shift = 40;
  } else {
    return Status::Error(EINVAL, "unknown size suffix");
  }
  if (shift > 0 && value > (UINT64_MAX >> shift)) return Status::Error(ERANGE, "size too large");
  return value << shift;
}

Result<std::chrono::milliseconds> ParseDuration(const std::string& text) {
  size_t pos = 0;
  while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
  if (pos == 0 || pos > 9) return Status::Error(EINVAL, "not a duration");
  uint64_t value = std::stoull(text.substr(0, pos));
  std::string unit = text.substr(pos);
  if (unit.empty() || unit == "ms") return std::chrono::milliseconds(value);
  if (unit == "s") return std::chrono::milliseconds(value * 1000);
  return Status::Error(EINVAL, "unknown unit (use ms or s)");
}

uint64_t DefaultCacheSize() {
  long pages = sysconf(_SC_PHYS_PAGES);
  long page = sysconf(_SC_PAGESIZE);
  uint64_t total = pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * page : (4ull << 30);
  return std::max<uint64_t>(total / 4, kMinCacheSize);
}

Status ApplyMountOptions(const std::string& list, MountOptions* out) {
  std::stringstream ss(list);
  std::string option;
  while (std::getline(ss, option, ',')) {
    if (option.empty()) continue;
    size_t eq = option.find('=');
    std::string key = option.substr(0, eq);
    bool has_value = eq != std::string::npos;
    std::string value = has_value ? option.substr(eq + 1) : "";
    auto need_value = [&]() -> Status {
      return has_value && !value.empty() ? Status::Ok() : Bad(option, "needs a value");
    };
    if (key == "cache_size") {
      if (Status st = need_value(); !st.ok()) return st;
      Result<uint64_t> size = ParseSize(value);
      if (!size.ok()) return Bad(option, "expected bytes with an optional K/M/G/T suffix");
      if (*size < kMinCacheSize) return Bad(option, "must be at least 16M");
      out->config.cache_size = *size;
    } else if (key == "flush_delay") {
      if (Status st = need_value(); !st.ok()) return st;
      Result<std::chrono::milliseconds> d = ParseDuration(value);
      if (!d.ok()) return Bad(option, "expected milliseconds, or a number with ms or s");
      out->config.flush_delay = *d;
    } else if (key == "unmount_timeout") {
      if (Status st = need_value(); !st.ok()) return st;
      Result<std::chrono::milliseconds> d = ParseDuration(value);
      if (!d.ok()) return Bad(option, "expected milliseconds, or a number with ms or s");
      out->config.unmount_retry = *d;
    } else if (key == "fsync") {
      if (value == "wait") {
        out->config.fsync_mode = FsyncMode::kWait;
      } else if (value == "defer") {
        out->config.fsync_mode = FsyncMode::kDefer;
      } else {
        return Bad(option, "expected fsync=wait or fsync=defer");
      }
    } else if (key == "queue_depth") {
      if (Status st = need_value(); !st.ok()) return st;
      Result<uint64_t> n = ParseSize(value);
      if (!n.ok() || *n < 1 || *n > 4096) return Bad(option, "expected a number from 1 to 4096");
      out->config.queue_depth = static_cast<unsigned>(*n);
    } else if (key == "zarr_chunk") {
      if (Status st = need_value(); !st.ok()) return st;
      Result<uint64_t> size = ParseSize(value);
      if (!size.ok() || (*size != 0 && (*size < (64u << 10) || *size > (4u << 20)))) {
        return Bad(option, "expected 0 (off) or a size from 64K to 4M");
      }
      out->config.zarr_chunk = *size;
    } else if (key == "max_read") {
      if (Status st = need_value(); !st.ok()) return st;
      Result<uint64_t> size = ParseSize(value);
      if (!size.ok() || *size < 4096 || *size > (1u << 20)) {
        return Bad(option, "expected a size from 4K to 1M");
      }
      out->max_read = static_cast<unsigned>(*size);
    } else if (key == "direct_read") {
      if (value != "on" && value != "off") {
        return Bad(option, "expected direct_read=on or direct_read=off");
      }
      out->direct_read = value == "on";
    } else if (key == "prefault") {
      if (value != "on" && value != "off") {
        return Bad(option, "expected prefault=on or prefault=off");
      }
      out->config.prefault = value == "on";
    } else if (key == "passthrough") {
      if (value == "auto") {
        out->passthrough = Passthrough::kAuto;
      } else if (value == "on") {
        out->passthrough = Passthrough::kOn;
      } else if (value == "off") {
        out->passthrough = Passthrough::kOff;
      } else {
        return Bad(option, "expected passthrough=auto, passthrough=on or passthrough=off");
      }
    } else if (key == "flush_io") {
      if (value == "auto") {
        out->config.flush_io = FlushIo::kAuto;
      } else if (value == "direct") {
        out->config.flush_io = FlushIo::kDirect;
      } else if (value == "buffered") {
        out->config.flush_io = FlushIo::kBuffered;
      } else {
        return Bad(option, "expected flush_io=auto, flush_io=direct or flush_io=buffered");
      }
    } else if (key == "log_level") {
      static const char* const kLevels[] = {"trace", "debug", "info", "warn", "error", "off"};
      if (std::find(std::begin(kLevels), std::end(kLevels), value) == std::end(kLevels)) {
        return Bad(option, "expected trace, debug, info, warn, error or off");
      }
      out->log_level = value;
    } else if (key == "log_file") {
      if (Status st = need_value(); !st.ok()) return st;
      out->log_file = value;
    } else if (std::find(std::begin(kFuseFlags), std::end(kFuseFlags), key) !=
                   std::end(kFuseFlags) && !has_value) {
      out->fuse_options.push_back(option);
    } else if (std::find(std::begin(kFuseValued), std::end(kFuseValued), key) !=
                   std::end(kFuseValued) && has_value) {
      out->fuse_options.push_back(option);
    } else {
      return Bad(option, "unknown option");
    }
  }
  return Status::Ok();
}

}  // namespace ckptfs
