#include "core/filesystem/open_files.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <vector>

#include "core/base/nanos.h"
#include "core/base/serve_policy.h"
#include "core/filesystem/open_mode.h"
#include "core/integrity/verifier.h"

namespace ckptfs {
namespace {

// Names OpenFiles remembers the write pieces of.
constexpr size_t kMaxRememberedNames = 4096;

// The error of every read of a file whose backing file failed its check.
Status ReadCheckFailed() {
  return Status::Error(EIO, "verify=reads: the backing file does not match its checksum");
}

// Blocks a write of [offset, offset+length) may need, whatever the file holds.
size_t WorstCaseBlocks(uint64_t offset, size_t length) {
  if (length == 0) return 0;
  return (offset + length - 1) / kBlockSize - offset / kBlockSize + 1;
}

// The mode a write or truncation by `c` leaves (the kernel's file_remove_privs): a caller
// without CAP_FSETID clears set-user-ID, and set-group-ID when group execute is set.
uint32_t ModeAfterChangeBy(uint32_t mode, const Caller& c) {
  if (c.uid == 0) return mode;
  mode &= ~static_cast<uint32_t>(S_ISUID);
  if (mode & S_IXGRP) mode &= ~static_cast<uint32_t>(S_ISGID);
  return mode;
}

}  // namespace

OpenFiles::OpenFiles(const Parts& parts)
    : env_(parts.env),
      stats_(parts.stats),
      arena_(parts.arena),
      ns_(parts.ns),
      zarr_(parts.zarr),
      handles_(parts.handles),
      kernel_state_(parts.kernel_state),
      reclaimer_(parts.reclaimer),
      verify_reads_(parts.verify_reads),
      sibling_read_ahead_(parts.env, parts.stats.files_read_ahead, policy::kBackingReadMinBytes) {}

void OpenFiles::WaitPassthroughReleased(uint64_t ino) {
  if (!open_backing_) return;  // Passthrough is off: no handle to wait for.
  NamespaceLock lock(ns_.mutex());
  passthrough_released_.wait_for(lock, policy::kPassthroughReleaseWait, [&]() REQUIRES(ns_lock) {
    InodeRef inode = ns_.FindLocked(ino);
    return !inode || inode->passthrough_handles == 0;
  });
}

void OpenFiles::WaitPageCacheFilled(NamespaceLock& lock, const InodeRef& inode) {
  page_cache_filled_.wait(lock, [&]() REQUIRES(ns_lock) { return !inode->page_cache_filling; });
}

Result<OpenFile> OpenFiles::Open(uint64_t ino, int flags, const Caller& c,
                                 Reservation& reservation, size_t& more, bool may_bypass) {
  PageCacheFill fill;
  Result<OpenFile> opened = OpenUnfilled(ino, flags, c, reservation, more, fill, may_bypass);
  if (fill.file) FillPageCache(fill);
  return opened;
}

void OpenFiles::FillPageCache(const PageCacheFill& fill) {
  thread_local std::vector<char> bytes;
  bytes.resize(fill.size);
  const bool read = fill.file->Read(bytes.data(), fill.size, 0).ok();
  const bool filled = read && fill_page_cache_(fill.inode->ino, bytes.data(), fill.size);
  if (read) stats_.bytes_read += fill.size;
  NamespaceLock lock(ns_.mutex());
  fill.inode->page_cache_filling = false;
  if (filled) {
    MutexLock ilock(fill.inode->mu);
    fill.inode->page_cache_filled_version = fill.version;
  }
  page_cache_filled_.notify_all();
}

Result<OpenFile> OpenFiles::OpenUnfilled(uint64_t ino, int flags, const Caller& c,
                                         Reservation& reservation, size_t& more,
                                         PageCacheFill& fill, bool may_bypass) {
  NamespaceLock lock(ns_.mutex());
  InodeRef inode = ns_.FindLocked(ino);
  if (!inode) return UnknownInode(ino);
  if ((flags & O_ACCMODE) != O_RDONLY) WaitPageCacheFilled(lock, inode);
  if (inode->type == FileType::kDirectory) return Status::Error(EISDIR, "open of a directory");
  if (inode->type == FileType::kSymlink) return Status::Error(ELOOP, "open of a symlink");
  if (inode->type != FileType::kRegular) {
    return Status::Error(ENXIO, "open of a special file (the kernel opens those itself)");
  }
  const bool truncate = (flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY;
  if (inode->passthrough_handles > 0 && (flags & O_ACCMODE) != O_RDONLY) {
    spdlog::warn("{}: refused to open for writing (ETXTBSY) while it is read through FUSE "
                 "passthrough; -o passthrough=off lets such writers in", ns_.PathLocked(inode));
    return Status::Error(ETXTBSY, "open for writing while read through FUSE passthrough");
  }
  if (IsZarrView(*inode)) {
    Result<ZarrViews::Opened> opened = zarr_.OpenLocked(inode, flags, reservation, more);
    if (!opened.ok() || more > 0) return opened.status();
    auto h = std::make_unique<Handle>(FileHandle(inode), flags);
    h->file()->wrote_version = opened->wrote_version;
    h->file()->request = c.request;
    if (opened->text) {
      // Its reads bypass the page cache, which may hold the text written before the array was
      // served with a fine grid.
      inode->open_handles++;
      return OpenFile{ns_.AttrOf(*inode), handles_.AddLocked(std::move(h)), true};
    }
    return OpenHandleLocked(std::move(h), /*may_bypass=*/false, c);
  }
  if (Status full = kernel_state_.RoomLocked(inode.get(), 1); !full.ok()) return full;
  if (truncate && reservation.count() == 0) {
    more = 1;
    return Status::Ok();
  }
  if (truncate) {
    bool mode_changed;
    {
      MutexLock ilock(inode->mu);
      if (inode->content.size() > 0 || inode->origin_dir) {
        inode->content = FileContent();
        inode->version++;
        inode->mtime = inode->ctime = WallTime();
      }
      inode->origin_dir.reset();
      const uint32_t mode = ModeAfterChangeBy(inode->mode, c);
      mode_changed = mode != inode->mode;
      inode->mode = mode;
    }
    if (mode_changed) ns_.JournalAttrsLocked(inode, /*set_mode=*/true, false, false);
  } else {
    Status st = ns_.LoadOriginLocked(inode);
    if (!st.ok()) return st;
  }
  auto h = std::make_unique<Handle>(FileHandle(inode), flags);
  h->file()->request = c.request;
  if (flags & O_TRUNC) {
    MutexLock ilock(inode->mu);
    h->file()->wrote_version = inode->version;
  }
  return OpenHandleLocked(std::move(h), may_bypass, c, may_bypass ? &fill : nullptr);
}

Result<OpenFile> OpenFiles::CreateLocked(const InodeRef& dir, const std::string& name,
                                         uint32_t mode, int flags, const Caller& c) {
  InodeRef inode = ns_.NewInodeLocked(FileType::kRegular, mode, c);
  ns_.AddNameLocked(dir, name, inode);
  inode->lookups++;
  {
    MutexLock ilock(inode->mu);
    inode->version = 1;  // A new file is a change even when nothing is written to it.
  }
  auto h = std::make_unique<Handle>(FileHandle(inode), flags);
  h->file()->wrote_version = 1;
  h->file()->request = c.request;
  return OpenHandleLocked(std::move(h), /*may_bypass=*/true, c);
}

OpenFile OpenFiles::OpenHandleLocked(std::unique_ptr<Handle> h, bool may_bypass, const Caller& c,
                                     PageCacheFill* fill) {
  FileHandle& f = *h->file();
  Inode* inode = f.inode.get();
  OpenFile out{ns_.AttrOf(*inode)};
  const bool writer_memory_forked = may_bypass && (h->flags & O_ACCMODE) == O_WRONLY &&
                                    c.writes_forked_memory && c.writes_forked_memory();
  const bool small_writes_before = writer_memory_forked && SmallWritesBeforeLocked(*inode);
  if (writer_memory_forked && !small_writes_before) stats_.forked_writer_opens++;
  MutexLock ilock(inode->mu);
  const FileContent* content = &inode->content;
  const policy::OpenChoice choice = policy::ChooseOpen({
      .may_bypass = may_bypass,
      .access = h->flags & O_ACCMODE,
      .size = content->size(),
      .whole_on_backing = content->memory_blocks() == 0 && content->base() && !content->base()->spill() &&
                          content->base_len() == content->size(),
      .prefetched = inode->backing_prefetched,
      .passthrough_on = static_cast<bool>(open_backing_),
      .passthrough_readers = inode->passthrough_handles > 0,
      .open = inode->open_handles > 0,
      .cached_open = inode->cached_handles > 0,
      .direct_reads = direct_reads_,
      // verify=reads: a fill would put the backing file's bytes unchecked in the page cache.
      .fill_on = fill != nullptr && static_cast<bool>(fill_page_cache_) && !verify_reads_,
      .filled = inode->page_cache_filled_version == inode->version,
      .page_cache_stale = inode->page_cache_stale,
      .writer_memory_forked = writer_memory_forked,
      .small_writes_before = small_writes_before,
  });
  if (choice.fill_page_cache) {
    inode->backing_prefetched = true;  // The fill reads the backing file whole.
    inode->page_cache_filling = true;
    *fill = {f.inode, content->base(), content->size(), inode->version};
  }
  if (choice.prefetch) {
    inode->backing_prefetched = true;
    env_.Advise(content->base()->fd(), 0, content->size());
  }
  if (choice.register_passthrough) inode->backing_id = open_backing_(content->base()->fd());
  // Only readers get here while passthrough handles are open (OpenReserved).
  f.passthrough = inode->backing_id >= 0;
  if (f.passthrough) {
    inode->passthrough_handles++;
    out.backing_id = inode->backing_id;
  } else {
    f.direct = choice.direct;
    if (!f.direct) {
      inode->cached_handles++;
      out.keep_cache = !inode->page_cache_stale;
      inode->page_cache_stale = false;
    }
    out.direct_io = f.direct;
  }
  inode->open_handles++;
  ilock.Unlock();
  if (choice.fill_page_cache || choice.prefetch) ReadAheadSiblingsLocked(*inode);
  Handle& opened = *h;
  out.handle = handles_.AddLocked(std::move(h));
  kernel_state_.RecordHandleLocked(opened);
  return out;
}

void OpenFiles::ReadAheadSiblingsLocked(const Inode& inode) {
  if (inode.names.empty()) return;
  const Inode::Name& name = *inode.names.begin();
  if (std::shared_ptr<BackingFile> dir = name.parent->BackingDir()) {
    sibling_read_ahead_.Opened(std::move(dir), name.name);
  }
}

OpenFiles::ReadAhead OpenFiles::ReadAheadLocked(FileHandle& h, uint64_t offset, size_t size) {
  const FileContent* c = &h.inode->content;
  const bool sequential = offset == h.next_read;
  h.next_read = offset + size;
  if (!sequential || !c->base() || offset + size >= c->base_len()) return {};
  uint64_t from = std::max(h.read_ahead_until, offset + size);
  uint64_t to = std::min(c->base_len(), offset + size + policy::kBackingReadAheadBytes);
  // Asks again once the reader has consumed half of what was asked for (or for the rest).
  if (to <= from || (to - from < policy::kBackingReadAheadBytes / 2 && to < c->base_len())) {
    return {};
  }
  h.read_ahead_until = to;
  return {c->base(), from, to - from};
}

Result<ReadData> OpenFiles::Read(FileHandle& h, uint64_t offset, size_t size) {
  ReadData out;
  // One lock for a plain file's read: the hot path of loads.
  bool viewed;
  ReadAhead ahead;
  std::shared_ptr<BackingFile> to_check;
  {
    MutexLock lock(h.inode->mu);
    viewed = IsZarrViewLocked(*h.inode);
    if (!viewed) {
      out.segments = h.inode->content.Read(offset, size);
      if (h.direct) ahead = ReadAheadLocked(h, offset, size);
      if (verify_reads_) {
        Result<std::shared_ptr<BackingFile>> unchecked =
            BackingToCheckLocked(*h.inode, out.segments);
        if (!unchecked.ok()) return unchecked.status();
        to_check = std::move(*unchecked);
      }
    }
  }
  if (to_check) {
    if (Status checked = CheckBacking(*h.inode, to_check); !checked.ok()) return checked;
  }
  if (viewed) {
    Result<ReadData> view_data = ZarrViews::Read(*h.inode, offset, size);
    if (!view_data.ok()) return view_data.status();
    out = std::move(*view_data);
  } else if (ahead.file) {
    env_.Advise(ahead.file->fd(), ahead.offset, ahead.length);
  }
  stats_.bytes_read += out.owned.size();
  for (const ReadSegment& s : out.segments) stats_.bytes_read += s.length;
  return out;
}

Result<std::shared_ptr<BackingFile>> OpenFiles::BackingToCheckLocked(
    const Inode& inode, const std::vector<ReadSegment>& segments) {
  for (const ReadSegment& seg : segments) {
    // A spill file holds ckptfs' own bytes of a version not sealed yet: nothing to check.
    if (seg.kind != ReadSegment::Kind::kBacking || seg.file->spill()) continue;
    if (!inode.read_check || inode.read_check->base.lock() != seg.file) return seg.file;
    if (inode.read_check->failed) return ReadCheckFailed();
    return std::shared_ptr<BackingFile>();
  }
  return std::shared_ptr<BackingFile>();
}

namespace {

// The backing file's identity and last change: equal for descriptors of one unchanged file.
Result<std::array<int64_t, 5>> FileAsItIs(const BackingFile& file) {
  struct stat st;
  if (Status s = file.Stat(&st); !s.ok()) return s;
  return std::array<int64_t, 5>{static_cast<int64_t>(st.st_dev), static_cast<int64_t>(st.st_ino),
                                st.st_size, NanosOf(st.st_mtim),
                                NanosOf(st.st_ctim)};
}

}  // namespace

Status OpenFiles::CheckSource(Inode& inode, const std::shared_ptr<BackingFile>& file) {
  if (file->spill()) return Status::Ok();
  {
    MutexLock lock(inode.mu);
    if (inode.read_check && inode.read_check->base.lock() == file) {
      return inode.read_check->failed ? ReadCheckFailed() : Status::Ok();
    }
  }
  return CheckBacking(inode, file);
}

Status OpenFiles::CheckBacking(Inode& inode, const std::shared_ptr<BackingFile>& file) {
  Result<std::array<int64_t, 5>> as_it_is = FileAsItIs(*file);
  if (!as_it_is.ok()) return as_it_is.status();
  {
    MutexLock lock(inode.mu);
    if (inode.read_check && inode.read_check->file == *as_it_is) {  // Through another descriptor.
      inode.read_check->base = file;
      return inode.read_check->failed ? ReadCheckFailed() : Status::Ok();
    }
  }
  const Verification v = VerifyFile(env_, file->fd(), file->fd());
  if (v.verdict == Verification::Verdict::kError) {
    return Status::Error(EIO, "verify=reads: " + v.reason);
  }
  stats_.bytes_verified_for_reads += v.size;
  const bool failed = v.verdict == Verification::Verdict::kMismatch;
  {
    MutexLock lock(inode.mu);
    if (inode.read_check && inode.read_check->file == *as_it_is) {  // Meanwhile by another read.
      return inode.read_check->failed ? ReadCheckFailed() : Status::Ok();
    }
    inode.read_check =
        std::make_unique<Inode::ReadCheck>(Inode::ReadCheck{file, *as_it_is, failed});
    if (v.verdict != Verification::Verdict::kNoChecksum) {
      inode.last_check = std::make_unique<Inode::StoredCheck>(
          Inode::StoredCheck::Now(inode.version, !failed, "reads"));
    }
  }
  if (v.verdict == Verification::Verdict::kNoChecksum) {
    stats_.read_files_unrecorded++;
    spdlog::info("verify=reads: inode {} is served unchecked: {}", inode.ino, v.reason);
    return Status::Ok();
  }
  if (!failed) {
    stats_.read_files_verified++;
    return Status::Ok();
  }
  stats_.read_mismatches++;
  std::string path;
  {
    NamespaceLock lock(ns_.mutex());
    const InodeRef found = ns_.FindLocked(inode.ino);
    path = found ? ns_.PathLocked(found) : "inode " + std::to_string(inode.ino);
  }
  spdlog::error("{}: its backing file does not match its checksum record (bytes {}-{}{}): its "
                "reads fail with EIO (verify=reads)",
                path, v.first_differing_begin, v.first_differing_end,
                v.size_differs() ? ", the size differs" : "");
  return ReadCheckFailed();
}

Result<size_t> OpenFiles::Write(FileHandle& h, uint64_t offset, const char* data, size_t size,
                                const Caller& c) {
  return WriteBytes(h, offset, data, size, nullptr, c);
}

Result<size_t> OpenFiles::Write(FileHandle& h, uint64_t offset, LandedBytes& landed,
                                const Caller& c) {
  return WriteBytes(h, offset, nullptr, landed.size, &landed, c);
}

Result<size_t> OpenFiles::WriteBytes(FileHandle& h, uint64_t offset, const char* data,
                                     size_t size, LandedBytes* landed, const Caller& c) {
  // A virtual chunk writes into its range of the real chunk; bytes past the real chunk's end
  // are padding beyond the array's shape and are not stored.
  std::shared_ptr<const ChunkView> view;
  {
    MutexLock lock(h.inode->mu);
    view = h.inode->view;
    if (view) h.inode->mtime = h.inode->ctime = WallTime();
    // Reaches the backing store with the version this write makes, at its seal.
    h.inode->mode = ModeAfterChangeBy(h.inode->mode, c);
  }
  ZarrViews::Target target{offset, size};
  if (view) {
    Result<ZarrViews::Target> in_real = ZarrViews::WriteTarget(*view, offset, size);
    if (!in_real.ok()) return in_real.status();
    target = *in_real;
  }
  const uint64_t target_offset = target.offset;
  const size_t target_size = target.size;
  Inode* inode = view ? view->real.get() : h.inode.get();
  // A virtual chunk's bytes land in the real chunk's blocks out of line: copied as they are.
  std::string copied;
  if (landed && view) {
    copied = landed->Copied();
    data = copied.data();
    landed = nullptr;
  }
  Reservation reservation;
  MutexLock lock(inode->mu);
  while (true) {
    // The kernel places O_APPEND writes at the end itself; write-back of mmap'ed pages through
    // such a descriptor comes at the pages' own offsets.
    size_t needed = landed ? inode->content.BlocksNeededForLand(target_offset, *landed)
                           : inode->content.BlocksNeededForWrite(target_offset, target_size);
    if (reservation.count() >= needed ||
        arena_.TryReserve(needed, &reservation, /*reclaim=*/false)) {
      if (landed) {
        Result<size_t> taken = inode->content.Land(target_offset, *landed, reservation);
        if (!taken.ok()) return taken.status();
        stats_.bytes_landed += uint64_t{*taken} * kBlockSize;
      } else if (Status st = inode->content.Write(target_offset, data, target_size, reservation);
                 !st.ok()) {
        return st;
      }
      if (!view) kernel_state_.RecordWriteLocked(*inode, target_offset, target_size);
      break;
    }
    lock.unlock();
    Result<Reservation> got = arena_.Reserve(
        std::max(needed, WorstCaseBlocks(target_offset, target_size)), c.interrupted);
    if (!got.ok()) return got.status();
    reservation = std::move(*got);
    lock.lock();
  }
  inode->version++;
  inode->mtime = inode->ctime = WallTime();
  h.wrote_version = inode->version;
  h.writers.Wrote(c.lock_owner);
  h.write_requests++;
  h.write_bytes += size;
  stats_.bytes_written += size;
  if (h.direct) {
    if (inode->cached_handles == 0) {
      inode->page_cache_stale = true;
    } else {
      lock.unlock();
      if (invalidate_page_cache_) {
        invalidate_page_cache_(h.inode->ino, offset, size);
      }
    }
  }
  return size;
}

Status OpenFiles::TruncateLocked(const InodeRef& inode, uint64_t size, uint64_t handle,
                                 timespec now, Reservation& reservation) {
  if (inode->type == FileType::kDirectory) return Status::Error(EISDIR, "truncate of a directory");
  if (inode->type != FileType::kRegular) {
    return Status::Error(EINVAL, "truncate of a symlink or special file");
  }
  if (IsZarrView(*inode)) return Status::Error(EPERM, "a view of a zarr array has a fixed size");
  if (inode->passthrough_handles > 0) {
    return Status::Error(ETXTBSY, "truncate while read through FUSE passthrough");
  }
  Status st = ns_.LoadOriginLocked(inode);
  if (!st.ok()) return st;
  MutexLock ilock(inode->mu);
  inode->content.Truncate(size, reservation);
  kernel_state_.RecordContentLocked(*inode);
  inode->version++;
  inode->mtime = inode->ctime = now;
  if (Handle* h = handle != 0 ? handles_.Find(handle) : nullptr; h && h->file()) {
    h->file()->wrote_version = inode->version;
  }
  return Status::Ok();
}

Status OpenFiles::Fallocate(FileHandle& h, int mode, uint64_t offset, uint64_t length) {
  if (mode != 0) return Status::Error(EOPNOTSUPP, "only plain fallocate is supported");
  MutexLock lock(h.inode->mu);
  if (h.inode->view) return Status::Error(EOPNOTSUPP, "fallocate of a zarr chunk");
  if (offset + length > h.inode->content.size()) {
    Reservation none;
    h.inode->content.Truncate(offset + length, none);
    kernel_state_.RecordWriteLocked(*h.inode, offset, length);
    h.inode->version++;
    h.wrote_version = h.inode->version;
    h.inode->mtime = h.inode->ctime = WallTime();
  }
  return Status::Ok();
}

Status OpenFiles::Flush(FileHandle& h, int flags, uint64_t lock_owner) {
  NamespaceLock lock(ns_.mutex());
  {
    InodeRef owner = ns_.ContentOwner(h.inode);
    MutexLock ilock(owner->mu);
    if (!h.writers.Closes(lock_owner)) return Status::Ok();  // Sealed at the writer's close.
  }
  SealLocked(h);
  if ((flags & O_ACCMODE) == O_RDONLY) return Status::Ok();  // Readers are not told.
  MutexLock ilock(h.inode->mu);
  if (!h.inode->flush_error.ok() && !h.inode->flush_error_reported) {
    h.inode->flush_error_reported = true;
    return h.inode->flush_error;
  }
  return Status::Ok();
}

void OpenFiles::SealLocked(FileHandle& h) {
  InodeRef owner = ns_.ContentOwner(h.inode);
  bool changed;
  {
    MutexLock lock(owner->mu);
    changed = h.wrote_version > owner->sealed_version;
  }
  if (changed) ns_.SealLocked(owner);
}

void OpenFiles::ReleaseLocked(FileHandle& h) {
  SealLocked(h);
  RememberWritePiecesLocked(h);
  if (h.passthrough) {
    if (--h.inode->passthrough_handles == 0) {
      close_backing_(h.inode->backing_id);
      h.inode->backing_id = -1;
      passthrough_released_.notify_all();
    }
  } else if (!h.direct) {
    MutexLock ilock(h.inode->mu);
    h.inode->cached_handles--;
  }
  kernel_state_.UnrecordHandleLocked(h);
  handles_.ForgetOpenedByLocked(h.request);
  if (InodeRef real = ns_.ContentOwner(h.inode); real != h.inode) CloseOneLocked(real);
  CloseOneLocked(h.inode);
  ns_.MaybeDropLocked(h.inode);
}

bool OpenFiles::SmallWritesBeforeLocked(const Inode& inode) {
  if (inode.names.empty()) return false;
  auto it = written_in_small_pieces_.find(inode.names.begin()->name);
  return it != written_in_small_pieces_.end() && it->second;
}

void OpenFiles::RememberWritePiecesLocked(FileHandle& h) {
  if (h.inode->names.empty()) return;
  uint64_t requests, bytes;
  {
    MutexLock ilock(h.inode->mu);
    if (h.inode->view) return;  // Its counts are the real chunk's to guard.
    requests = h.write_requests;
    bytes = h.write_bytes;
  }
  if (requests < policy::kSmallWritesMinRequests) return;  // Too few to tell.
  if (written_in_small_pieces_.size() >= kMaxRememberedNames) written_in_small_pieces_.clear();
  written_in_small_pieces_[h.inode->names.begin()->name] =
      policy::WroteInSmallPieces(requests, bytes);
}

void OpenFiles::CloseOneLocked(const InodeRef& inode) {
  inode->open_handles--;
  // A file read from the backing store and left unchanged gives its descriptor back; a durable
  // one that reads from a spill file gives back the spill file's disk space (as at its flush).
  MutexLock ilock(inode->mu);
  const std::shared_ptr<BackingFile>& base = inode->content.base();
  if (inode->content.memory_blocks() == 0 || (base && base->spill())) {
    reclaimer_.UnloadLocked(inode);
  }
}

}  // namespace ckptfs
