// The checksum manifest: the records (checksum_record.h) of a directory's files kept in one file
// beside them, BACKING/DIR/.ckptfs-checksums.json, for backing filesystems that keep no user
// extended attributes (NFS before 4.2, some FUSE filesystems). Its text:
//   {"ckptfs_checksums": 1, "files": {"<name>": "<record as in the xattr>", ...}}
// A manifest is read back from a directory anyone may have edited: it is read only up to
// kMaxManifestBytes, parsed strictly (kMaxManifestFiles entries, each a valid record) and
// refused whole when anything is wrong.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "core/backing/backing_paths.h"
#include "core/base/status.h"
#include "core/integrity/checksum_record.h"
#include "iouring/env.h"

namespace ckptfs {

inline constexpr size_t kMaxManifestFiles = 16384;
// No manifest of kMaxManifestFiles records of names of NAME_MAX bytes is longer.
inline constexpr size_t kMaxManifestBytes = 64 + kMaxManifestFiles * (kMaxChecksumRecordBytes + 270);

using ChecksumManifest = std::map<std::string, ChecksumRecord>;

std::string FormatChecksumManifest(const ChecksumManifest& manifest);
// EINVAL saying what is wrong for anything but a manifest as FormatChecksumManifest writes it
// (keys in any order, any JSON spacing).
Result<ChecksumManifest> ParseChecksumManifest(std::string_view text);

// The manifest of the directory `dir_fd`: ENOENT when it has none, EFBIG when it is longer than
// kMaxManifestBytes (never read whole), EINVAL when malformed. The last few manifests parsed are
// kept (by their file's device, inode, size and times): an unchanged one is not read again.
Result<ChecksumManifest> ReadChecksumManifest(Env& env, int dir_fd);

// The record of `name` in the manifest of `dir_fd`: ENODATA when the manifest has no entry of
// that name or there is no manifest; the manifest's error (naming it) when it cannot be used.
Result<ChecksumRecord> ManifestRecordOf(Env& env, int dir_fd, const std::string& name);

// Sets the records of `records` in the manifest of `dir_fd`: the manifest is read (a malformed
// one is replaced, with a warning), entries of names no longer in the directory dropped, the
// new text written to `staging_fd`/`staging_name`, made durable, and renamed over the manifest
// (the caller syncs `dir_fd`). EFBIG when it would hold more than kMaxManifestFiles records.
Status UpdateChecksumManifest(Env& env, int dir_fd, int staging_fd, const std::string& staging_name,
                              const ChecksumManifest& records);

}  // namespace ckptfs
