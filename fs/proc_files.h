// Bounded reads of a process's files under /proc, and the parsers of /proc/PID/status fields:
// what the FUSE adapter learns of the process behind a request.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ckptfs {

// The first 16 KiB of /proc/`pid`/`name` ("status", "cmdline", ...); nullopt when it cannot be
// opened (the process gone). A longer file compares by its start.
std::optional<std::string> ReadProcFile(pid_t pid, const char* name);

// The target of /proc/`pid`/exe; nullopt when it cannot be read.
std::optional<std::string> ProcExecutable(pid_t pid);

// The value of field `key` ("RssAnon", "PPid", ...) of a /proc/PID/status text, read as decimal
// (kB for sizes) or as hexadecimal (signal masks); nullopt when the field is missing, malformed
// or too large.
std::optional<uint64_t> ProcStatusField(std::string_view status, std::string_view key);
std::optional<uint64_t> ProcStatusMask(std::string_view status, std::string_view key);

}  // namespace ckptfs
