#include "core/replication/stand_in_record.h"

#include <fcntl.h>

#include <optional>
#include <vector>

#include "core/backing/backing_paths.h"
#include "core/backing/durable_write.h"
#include "core/replication/replication_policy.h"

namespace ckptfs::replication {
namespace {

constexpr int kDirFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW;
// "<at most 20 digits>[ <at most 20 digits>]\n".
constexpr size_t kMaxRecordBytes = 42;

std::string RecordName(const std::string& node, const std::string& run) {
  return node + "." + run;
}

// The directory of the records, made (and its name made durable) when `make` and missing.
Result<int> OpenRecordDir(Env& env, int root_fd, bool make) {
  Result<int> reserved = env.Open(root_fd, kReservedName, kDirFlags);
  if (!reserved.ok()) return reserved;
  Result<int> dir = env.Open(*reserved, kStoodInDirName, kDirFlags);
  if (!dir.ok() && dir.status().err() == ENOENT && make) {
    Status made = env.Mkdir(*reserved, kStoodInDirName, 0755);
    if (made.ok() || made.err() == EEXIST) {
      const int parent = *reserved;
      Status synced = env.Sync(std::span<const int>(&parent, 1), false)[0];
      dir = synced.ok() ? env.Open(*reserved, kStoodInDirName, kDirFlags) : Result<int>(synced);
    } else {
      dir = made;
    }
  }
  env.Close(*reserved);
  return dir;
}

}  // namespace

Status WriteStandInRecord(Env& env, int root_fd, int staging_fd, const std::string& node,
                          const std::string& run, StandInRecord record) {
  Result<int> dir = OpenRecordDir(env, root_fd, true);
  if (!dir.ok()) return dir.status();
  const std::string name = RecordName(node, run);
  const std::string text =
      std::to_string(record.through) +
      (record.markers != 0 ? " " + std::to_string(record.markers) : std::string()) + "\n";
  Status st = WriteFileDurably(
      env, staging_fd, ".stood-in." + name, *dir, name, 0644,
      [&](int fd) { return env.WriteAt(fd, text.data(), text.size(), 0); }, DirSync::kSync);
  env.Close(*dir);
  return st;
}

Result<StandInRecord> ReadStandInRecord(Env& env, int root_fd, const std::string& node,
                                        const std::string& run) {
  Result<int> dir = OpenRecordDir(env, root_fd, false);
  if (!dir.ok()) return dir.status().err() == ENOENT ? Result<StandInRecord>(StandInRecord{}) : dir.status();
  Result<int> file = env.Open(*dir, RecordName(node, run), O_RDONLY | O_NOFOLLOW);
  env.Close(*dir);
  if (!file.ok()) return file.status().err() == ENOENT ? Result<StandInRecord>(StandInRecord{}) : file.status();
  // One byte more than a record can hold: a longer file is refused. Past the end reads as zeros.
  char text[kMaxRecordBytes + 1] = {};
  static_assert(sizeof text > kMaxRecordBytes);
  Status st = env.Read(*file, text, sizeof text, 0);
  env.Close(*file);
  if (!st.ok()) return st;
  const Status invalid = Status::Error(EINVAL, "not a stand-in record: " + RecordName(node, run));
  size_t i = 0;
  // The number at text[i], at least one digit; nullopt when there is none or it overflows.
  auto number = [&]() -> std::optional<uint64_t> {
    uint64_t n = 0;
    const size_t start = i;
    for (; i < kMaxRecordBytes && text[i] >= '0' && text[i] <= '9'; ++i) {
      const uint64_t digit = static_cast<uint64_t>(text[i] - '0');
      if (n > (UINT64_MAX - digit) / 10) return std::nullopt;
      n = n * 10 + digit;
    }
    if (i == start) return std::nullopt;
    return n;
  };
  StandInRecord record;
  std::optional<uint64_t> through = number();
  if (!through) return invalid;
  record.through = *through;
  if (i < kMaxRecordBytes && text[i] == ' ') {
    ++i;
    std::optional<uint64_t> markers = number();
    if (!markers) return invalid;
    record.markers = *markers;
  }
  bool rest_empty = i < kMaxRecordBytes && text[i] == '\n';
  for (size_t j = i + 1; rest_empty && j < sizeof text; ++j) rest_empty = text[j] == '\0';
  if (!rest_empty) return invalid;
  return record;
}

Status RemoveStandInRecord(Env& env, int root_fd, const std::string& node,
                           const std::string& run) {
  Result<int> dir = OpenRecordDir(env, root_fd, false);
  if (!dir.ok()) return dir.status().err() == ENOENT ? Status::Ok() : dir.status();
  Status st = env.Unlink(*dir, RecordName(node, run));
  env.Close(*dir);
  return st.err() == ENOENT ? Status::Ok() : st;
}

std::optional<std::string> RunOfStandInRecord(std::string_view name, std::string_view node) {
  // "<node>.<run>", the run of a fixed length: never another node's whose name holds a dot.
  if (name.size() <= node.size() + 1 || name.substr(0, node.size()) != node ||
      name[node.size()] != '.') {
    return std::nullopt;
  }
  const std::string_view run = name.substr(node.size() + 1);
  if (!policy::RunNumber(run)) return std::nullopt;
  return std::string(run);
}

Status RemoveStandInRecordsOfOtherRuns(Env& env, int root_fd, const std::string& node,
                                       const std::string& keep) {
  Result<int> dir = OpenRecordDir(env, root_fd, false);
  if (!dir.ok()) return dir.status().err() == ENOENT ? Status::Ok() : dir.status();
  Result<std::vector<std::string>> names = env.ListDir(*dir);
  Status st = names.status();
  for (const std::string& name : names.ok() ? *names : std::vector<std::string>()) {
    const std::optional<std::string> run = RunOfStandInRecord(name, node);
    if (!run || *run == keep) continue;
    Status removed = env.Unlink(*dir, name);
    if (!removed.ok() && removed.err() != ENOENT && st.ok()) st = removed;
  }
  env.Close(*dir);
  return st;
}

}  // namespace ckptfs::replication
