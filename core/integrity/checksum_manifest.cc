#include "core/integrity/checksum_manifest.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <array>
#include <cerrno>
#include <memory>
#include <nlohmann/json.hpp>
#include <iterator>
#include <utility>
#include <vector>

#include "core/backing/durable_write.h"
#include "core/base/nanos.h"
#include "core/base/thread_annotations.h"

namespace ckptfs {
namespace {

constexpr int kManifestVersion = 1;

Status Malformed(const std::string& why) {
  return Status::Error(EINVAL, std::string("malformed checksum manifest ") + kChecksumManifestName +
                                   ": " + why);
}

}  // namespace

std::string FormatChecksumManifest(const ChecksumManifest& manifest) {
  nlohmann::json files = nlohmann::json::object();
  for (const auto& [name, record] : manifest) files[name] = FormatChecksumRecord(record);
  nlohmann::json j = {{"ckptfs_checksums", kManifestVersion}, {"files", std::move(files)}};
  return j.dump(1, ' ', /*ensure_ascii=*/false, nlohmann::json::error_handler_t::replace) + "\n";
}

Result<ChecksumManifest> ParseChecksumManifest(std::string_view text) {
  if (text.size() > kMaxManifestBytes) return Malformed("too long");
  // Nothing nests deeper than {"files": {"name": "record"}}: deeper input is refused as it is
  // parsed, not built.
  bool too_deep = false;
  auto limit = [&too_deep](int depth, nlohmann::json::parse_event_t, nlohmann::json&) {
    if (depth > 2) too_deep = true;
    return !too_deep;
  };
  nlohmann::json j = nlohmann::json::parse(text, limit, /*allow_exceptions=*/false);
  if (too_deep) return Malformed("nested too deep");
  if (j.is_discarded() || !j.is_object()) return Malformed("not a JSON object");
  auto version = j.find("ckptfs_checksums");
  if (version == j.end() || !version->is_number_integer() || *version != kManifestVersion) {
    return Malformed("no \"ckptfs_checksums\": 1");
  }
  auto files = j.find("files");
  if (files == j.end() || !files->is_object()) return Malformed("no \"files\" object");
  if (files->size() > kMaxManifestFiles) return Malformed("more than " + std::to_string(kMaxManifestFiles) + " files");
  ChecksumManifest manifest;
  for (const auto& [name, record] : files->items()) {
    if (name.empty() || name.size() > 255 || name.find('/') != std::string::npos ||
        name.find('\0') != std::string::npos || name == "." || name == "..") {
      return Malformed("a file name that is no name");
    }
    if (!record.is_string()) return Malformed("the record of a file is not a string");
    Result<ChecksumRecord> parsed = ParseChecksumRecord(record.get_ref<const std::string&>());
    if (!parsed.ok()) return Malformed(name + ": " + parsed.status().message());
    manifest.emplace(name, std::move(*parsed));
  }
  return manifest;
}

namespace {

// The manifests parsed last, by their file's identity and last change: the files of a directory,
// verified one after another, have its manifest parsed once while it is unchanged (an update
// renames a new file in). Thread-safe.
class ParsedManifests {
 public:
  using Id = std::array<int64_t, 5>;
  std::shared_ptr<const ChecksumManifest> Find(const Id& id) {
    MutexLock lock(mu_);
    for (const auto& [kept, manifest] : kept_) {
      if (kept == id) return manifest;
    }
    return nullptr;
  }
  void Keep(const Id& id, std::shared_ptr<const ChecksumManifest> manifest) {
    MutexLock lock(mu_);
    if (kept_.size() == kKept) kept_.erase(kept_.begin());
    kept_.emplace_back(id, std::move(manifest));
  }

 private:
  static constexpr size_t kKept = 8;
  Mutex mu_;
  std::vector<std::pair<Id, std::shared_ptr<const ChecksumManifest>>> kept_ GUARDED_BY(mu_);
};

ParsedManifests& Parsed() {
  static ParsedManifests parsed;
  return parsed;
}

Result<std::shared_ptr<const ChecksumManifest>> ReadParsedManifest(Env& env, int dir_fd) {
  // Not blocked by a FIFO of that name, nor led elsewhere by a symbolic link.
  Result<int> fd =
      env.Open(dir_fd, kChecksumManifestName, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (!fd.ok() && fd.status().err() == ELOOP) return Malformed("a symbolic link, not followed");
  if (!fd.ok()) return fd.status();
  struct stat st {};
  Status s = env.Stat(*fd, "", &st);
  const ParsedManifests::Id id{static_cast<int64_t>(st.st_dev), static_cast<int64_t>(st.st_ino),
                               st.st_size, NanosOf(st.st_mtim),
                               NanosOf(st.st_ctim)};
  std::shared_ptr<const ChecksumManifest> kept = s.ok() ? Parsed().Find(id) : nullptr;
  std::string text;
  if (s.ok() && !kept && !S_ISREG(st.st_mode)) s = Malformed("not a regular file");
  if (s.ok() && !kept && static_cast<uint64_t>(st.st_size) > kMaxManifestBytes) {
    s = Status::Error(EFBIG, std::string(kChecksumManifestName) + " is longer than " +
                                 std::to_string(kMaxManifestBytes) + " bytes: not read");
  }
  if (s.ok() && !kept) {
    text.resize(static_cast<size_t>(st.st_size));
    s = env.Read(*fd, text.data(), text.size(), 0);
  }
  env.Close(*fd);
  if (!s.ok()) return s;
  if (kept) return kept;
  Result<ChecksumManifest> parsed = ParseChecksumManifest(text);
  if (!parsed.ok()) return parsed.status();
  auto manifest = std::make_shared<const ChecksumManifest>(std::move(*parsed));
  Parsed().Keep(id, manifest);
  return manifest;
}

}  // namespace

Result<ChecksumManifest> ReadChecksumManifest(Env& env, int dir_fd) {
  Result<std::shared_ptr<const ChecksumManifest>> manifest = ReadParsedManifest(env, dir_fd);
  if (!manifest.ok()) return manifest.status();
  return **manifest;
}

Result<ChecksumRecord> ManifestRecordOf(Env& env, int dir_fd, const std::string& name) {
  Result<std::shared_ptr<const ChecksumManifest>> manifest = ReadParsedManifest(env, dir_fd);
  if (!manifest.ok() && manifest.status().err() == ENOENT) {
    return Status::Error(ENODATA, std::string("no checksum record (no extended attribute, no ") +
                                      kChecksumManifestName + ")");
  }
  if (!manifest.ok()) return manifest.status();
  auto it = (*manifest)->find(name);
  if (it == (*manifest)->end()) {
    return Status::Error(ENODATA, std::string("no checksum record (no extended attribute, none in ") +
                                      kChecksumManifestName + ")");
  }
  return it->second;
}

Status UpdateChecksumManifest(Env& env, int dir_fd, int staging_fd, const std::string& staging_name,
                              const ChecksumManifest& records) {
  Result<ChecksumManifest> read = ReadChecksumManifest(env, dir_fd);
  ChecksumManifest manifest;
  if (read.ok()) {
    manifest = std::move(*read);
  } else if (read.status().err() != ENOENT) {
    spdlog::warn("{}: replaced: {}", kChecksumManifestName, read.status().ToString());
  }
  // Entries of files gone from the directory (removed or renamed) go.
  for (auto it = manifest.begin(); it != manifest.end();) {
    struct stat st {};
    const bool gone = !records.count(it->first) && env.Stat(dir_fd, it->first, &st).err() == ENOENT;
    it = gone ? manifest.erase(it) : std::next(it);
  }
  for (const auto& [name, record] : records) manifest[name] = record;
  if (manifest.size() > kMaxManifestFiles) {
    return Status::Error(EFBIG, std::string(kChecksumManifestName) + " would hold more than " +
                                    std::to_string(kMaxManifestFiles) + " records");
  }
  const std::string text = FormatChecksumManifest(manifest);
  return WriteFileDurably(
      env, staging_fd, staging_name, dir_fd, kChecksumManifestName, 0644,
      [&](int fd) { return env.WriteAt(fd, text.data(), text.size(), 0); },
      DirSync::kCallerSyncs);
}

}  // namespace ckptfs
