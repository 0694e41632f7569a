#include "fs/fuse_adapter.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <vector>

#include "core/base/serve_policy.h"
#include "core/filesystem/filesystem.h"
#include "fs/fatal_signal.h"
#include "fs/forked_writer.h"
#include "fs/session_hooks.h"
#include "fs/write_landing.h"

namespace ckptfs {
namespace {

// How long the kernel keeps attributes and entries (kAttrTimeout, core/tree/namespace.h), and
// those of settled files (policy::AttrSettled).
constexpr double kAttrSeconds = std::chrono::duration<double>(kAttrTimeout).count();
constexpr double kSettledAttrSeconds =
    std::chrono::duration<double>(policy::kSettledAttrTimeout).count();

double AttrSeconds(const Attr& a) { return a.settled ? kSettledAttrSeconds : kAttrSeconds; }
// st_blksize. Python sizes each open file's buffer by it: at 1 MiB, glibc maps that buffer
// afresh per open, and a reader of 1 MiB zarr chunks faulted 256 pages per chunk (25x slower
// than at 128 KiB on a VM with costly faults). 128 KiB still coalesces small buffered writes.
constexpr blksize_t kPreferredIoSize = 128 << 10;
AdapterOptions adapter_options;  // Set before the session starts (ConfigureAdapter).
ForkedWriters forked_writers;
// Zero bytes served for holes.
alignas(4096) const char kZeros[kBlockSize] = {};

Filesystem& Fs(fuse_req_t req) { return *static_cast<Filesystem*>(fuse_req_userdata(req)); }

struct stat ToStat(const Attr& a) {
  struct stat st {};
  st.st_ino = a.ino;
  st.st_mode = a.mode;
  st.st_nlink = a.nlink;
  st.st_uid = a.uid;
  st.st_gid = a.gid;
  st.st_size = static_cast<off_t>(a.size);
  st.st_rdev = static_cast<dev_t>(a.rdev);
  st.st_blksize = kPreferredIoSize;
  st.st_blocks = a.no_blocks ? 0 : static_cast<blkcnt_t>((a.size + 511) / 512);
  st.st_atim = a.atime;
  st.st_mtim = a.mtime;
  st.st_ctim = a.ctime;
  return st;
}

fuse_entry_param ToEntry(const Attr& a) {
  fuse_entry_param e {};
  e.ino = a.ino;
  e.generation = 0;
  e.attr = ToStat(a);
  e.attr_timeout = AttrSeconds(a);
  e.entry_timeout = IsTensorViewRoot(a.ino) ? 0 : AttrSeconds(a);
  return e;
}

Caller CallerOf(fuse_req_t req) {
  const fuse_ctx* ctx = fuse_req_ctx(req);
  Caller c{ctx->uid, ctx->gid, ctx->umask, RequestResent(), RequestId()};
  c.interrupted = [tid = ctx->pid] { return BeingKilled(tid); };
  c.writes_forked_memory = [tid = ctx->pid] { return forked_writers.WritesForkedMemory(tid); };
  return c;
}

void ReplyStatus(fuse_req_t req, const Status& st) { fuse_reply_err(req, st.ok() ? 0 : st.err()); }

// A failed lookup (ENOENT too) is an error reply, never a negative entry the kernel would keep:
// a name another mount makes is found at the next lookup.
void ReplyEntry(fuse_req_t req, const Result<Attr>& r) {
  if (!r.ok()) {
    fuse_reply_err(req, r.status().err());
    return;
  }
  fuse_entry_param e = ToEntry(*r);
  fuse_reply_entry(req, &e);
}

void ReplyAttr(fuse_req_t req, const Result<Attr>& r) {
  if (!r.ok()) {
    fuse_reply_err(req, r.status().err());
    return;
  }
  struct stat st = ToStat(*r);
  fuse_reply_attr(req, &st, AttrSeconds(*r));
}

// Runs a handler body; an escaping exception is logged and answered with EIO.
template <typename F>
void Guard(fuse_req_t req, const char* op, F&& body) {
  try {
    body();
  } catch (const std::exception& e) {
    spdlog::error("{}: unexpected failure: {}", op, e.what());
    fuse_reply_err(req, EIO);
  }
}

void Init(void* userdata, fuse_conn_info* conn) {
  if (adapter_options.direct_reads && DirectIoMmapAllowed()) {
    static_cast<Filesystem*>(userdata)->EnableDirectReads();
  }
  conn->max_write = kMaxWriteBytes;
  conn->max_readahead = std::max(conn->max_readahead, kReadAheadBytes);
  conn->max_read = adapter_options.max_read;
  if (conn->capable & FUSE_CAP_SPLICE_WRITE) conn->want |= FUSE_CAP_SPLICE_WRITE;
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
  if (conn->capable & FUSE_CAP_PARALLEL_DIROPS) conn->want |= FUSE_CAP_PARALLEL_DIROPS;
  // Locks are kept by the kernel for this mount; readdirplus is not implemented. Every change
  // of file data passes through the kernel (its page cache stays right), so a changed mtime must
  // not drop the cache: files read back right after they were written are served from it. The
  // kernel clears set-ID bits itself (a setattr) on truncate, chown and cached writes; core
  // clears them on direct writes and truncating opens, which the kernel leaves to the daemon.
  conn->want &= ~(FUSE_CAP_POSIX_LOCKS | FUSE_CAP_FLOCK_LOCKS | FUSE_CAP_READDIRPLUS |
                  FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_AUTO_INVAL_DATA | FUSE_CAP_HANDLE_KILLPRIV);
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guard(req, "lookup", [&] { ReplyEntry(req, Fs(req).Lookup(parent, name)); });
}

void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Fs(req).Forget(ino, nlookup);
  fuse_reply_none(req);
}

void ForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) Fs(req).Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info*) {
  Guard(req, "getattr", [&] { ReplyAttr(req, Fs(req).GetAttr(ino)); });
}

void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  Guard(req, "setattr", [&] {
    SetAttrRequest r;
    if (to_set & FUSE_SET_ATTR_MODE) r.mode = attr->st_mode;
    if (to_set & FUSE_SET_ATTR_UID) r.uid = attr->st_uid;
    if (to_set & FUSE_SET_ATTR_GID) r.gid = attr->st_gid;
    if (to_set & FUSE_SET_ATTR_SIZE) r.size = static_cast<uint64_t>(attr->st_size);
    if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
      r.atime = timespec{0, UTIME_NOW};
    } else if (to_set & FUSE_SET_ATTR_ATIME) {
      r.atime = attr->st_atim;
    }
    if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
      r.mtime = timespec{0, UTIME_NOW};
    } else if (to_set & FUSE_SET_ATTR_MTIME) {
      r.mtime = attr->st_mtim;
    }
    ReplyAttr(req, Fs(req).SetAttr(ino, r, fi ? fi->fh : 0));
  });
}

void Readlink(fuse_req_t req, fuse_ino_t ino) {
  Guard(req, "readlink", [&] {
    Result<std::string> r = Fs(req).Readlink(ino);
    if (!r.ok()) {
      fuse_reply_err(req, r.status().err());
    } else {
      fuse_reply_readlink(req, r->c_str());
    }
  });
}

void Mkdir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  Guard(req, "mkdir", [&] { ReplyEntry(req, Fs(req).Mkdir(parent, name, mode, CallerOf(req))); });
}

void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guard(req, "unlink", [&] { ReplyStatus(req, Fs(req).Unlink(parent, name, CallerOf(req))); });
}

void Rmdir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Guard(req, "rmdir", [&] { ReplyStatus(req, Fs(req).Rmdir(parent, name, CallerOf(req))); });
}

void Symlink(fuse_req_t req, const char* target, fuse_ino_t parent, const char* name) {
  Guard(req, "symlink",
        [&] { ReplyEntry(req, Fs(req).Symlink(parent, name, target, CallerOf(req))); });
}

void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t new_parent,
            const char* new_name, unsigned flags) {
  Guard(req, "rename",
        [&] { ReplyStatus(req, Fs(req).Rename(parent, name, new_parent, new_name, flags,
                                                        CallerOf(req))); });
}

void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t new_parent, const char* new_name) {
  Guard(req, "link", [&] { ReplyEntry(req, Fs(req).Link(ino, new_parent, new_name, CallerOf(req))); });
}

void ReplyOpen(fuse_req_t req, fuse_file_info* fi, const Result<OpenFile>& r, bool create) {
  if (!r.ok()) {
    fuse_reply_err(req, r.status().err());
    return;
  }
  fi->fh = r->handle;
  fi->direct_io = r->direct_io;
  fi->keep_cache = r->keep_cache;
  if (r->backing_id >= 0) RegisterOpen(r->handle, r->backing_id);
  // The close of a file opened (not created) for reading changes nothing (Filesystem::Flush):
  // spare that request.
  fi->noflush = !create && (fi->flags & O_ACCMODE) == O_RDONLY;
  Filesystem& fs = Fs(req);  // A reply frees `req`, whether or not it reached the kernel.
  if (create) {
    fuse_entry_param e = ToEntry(r->attr);
    if (fuse_reply_create(req, &e, fi) != 0) (void)fs.Release(r->handle);
  } else if (fuse_reply_open(req, fi) != 0) {
    (void)fs.Release(r->handle);
  }
}

void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  Guard(req, "create", [&] {
    ReplyOpen(req, fi, Fs(req).Create(parent, name, mode, fi->flags, CallerOf(req)), true);
  });
}

void Mknod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  Guard(req, "mknod",
        [&] { ReplyEntry(req, Fs(req).Mknod(parent, name, mode, rdev, CallerOf(req))); });
}

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guard(req, "open",
        [&] { ReplyOpen(req, fi, Fs(req).Open(ino, fi->flags, CallerOf(req)), false); });
}

// True when the reply has backing ranges and each lies within its file as it is now, so
// splicing them yields every byte (an external truncation of a backing file must read as zeros,
// not as an early EOF).
bool SpliceableFromBacking(const std::vector<ReadSegment>& segments) {
  bool any = false;
  for (const ReadSegment& s : segments) {
    if (s.kind != ReadSegment::Kind::kBacking) continue;
    struct stat st {};
    if (!s.file->Stat(&st).ok() ||
        s.file_offset + s.length > static_cast<uint64_t>(st.st_size)) {
      return false;
    }
    any = true;
  }
  return any;
}

// Calls piece(segment, data, length) for each piece of a reply, in order: a memory segment
// whole (data in its block), a backing segment whole (data null), a run of zeros in pieces of
// at most kBlockSize (data kZeros).
template <typename Piece>
void ForEachPiece(const std::vector<ReadSegment>& segments, Piece&& piece) {
  for (const ReadSegment& s : segments) {
    if (s.kind != ReadSegment::Kind::kZeros) {
      piece(s, s.data, s.length);
      continue;
    }
    for (size_t left = s.length; left > 0;) {
      size_t n = std::min(left, kBlockSize);
      piece(s, kZeros, n);
      left -= n;
    }
  }
}

// Replies with the segments, the backing ranges spliced from their files into the kernel's
// pages without being copied through this process (libfuse's splice path; the reply and its
// header must fit one pipe, which is why max_read defaults to half the 1 MiB pipe limit).
void ReplySpliced(fuse_req_t req, const std::vector<ReadSegment>& segments) {
  std::vector<fuse_buf> bufs;
  ForEachPiece(segments, [&](const ReadSegment& s, const char* data, size_t length) {
    if (s.kind == ReadSegment::Kind::kBacking) {
      const auto from_file = static_cast<fuse_buf_flags>(FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK);
      bufs.push_back({length, from_file, nullptr, s.file->fd(), static_cast<off_t>(s.file_offset)});
    } else {
      bufs.push_back({length, fuse_buf_flags{}, const_cast<char*>(data), -1, 0});
    }
  });
  // fuse_bufvec ends in a one-element array that holds all the buffers.
  std::vector<char> storage(sizeof(fuse_bufvec) + bufs.size() * sizeof(fuse_buf));
  auto* bufv = reinterpret_cast<fuse_bufvec*>(storage.data());
  bufv->count = bufs.size();
  bufv->idx = 0;
  bufv->off = 0;
  std::copy(bufs.begin(), bufs.end(), bufv->buf);
  // libfuse copies instead where it cannot splice (a reply larger than its pipe can grow).
  fuse_reply_data(req, bufv, fuse_buf_copy_flags{});
}

// Replies with one writev straight from the blocks; backing ranges are read into this thread's
// buffer first (a request is at most max_read bytes).
void ReplyCopied(fuse_req_t req, const std::vector<ReadSegment>& segments) {
  thread_local std::vector<char> staging;
  size_t backing_bytes = 0;
  for (const ReadSegment& s : segments) {
    if (s.kind == ReadSegment::Kind::kBacking) backing_bytes += s.length;
  }
  if (staging.size() < backing_bytes) staging.resize(backing_bytes);
  std::vector<iovec> iov;
  size_t used = 0;
  int err = 0;
  ForEachPiece(segments, [&](const ReadSegment& s, const char* data, size_t length) {
    if (s.kind != ReadSegment::Kind::kBacking) {
      iov.push_back({const_cast<char*>(data), length});
      return;
    }
    if (err != 0) return;
    // Bytes past the end of the backing file read as zeros.
    Status read = s.file->Read(staging.data() + used, length, s.file_offset);
    if (!read.ok()) {
      err = read.err();
      return;
    }
    iov.push_back({staging.data() + used, length});
    used += length;
  });
  if (err != 0) {
    fuse_reply_err(req, err);
    return;
  }
  fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
}

void Read(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  Guard(req, "read", [&] {
    Result<ReadData> r = Fs(req).Read(fi->fh, static_cast<uint64_t>(off), size);
    if (!r.ok()) {
      fuse_reply_err(req, r.status().err());
      return;
    }
    if (r->segments.empty()) {
      fuse_reply_buf(req, r->owned.data(), r->owned.size());
      return;
    }
    if (SpliceableFromBacking(r->segments)) {
      ReplySpliced(req, r->segments);
    } else {
      ReplyCopied(req, r->segments);
    }
  });
}

void Write(fuse_req_t req, fuse_ino_t, const char* buf, size_t size, off_t off,
           fuse_file_info* fi) {
  Guard(req, "write", [&] {
    Caller caller = CallerOf(req);
    caller.lock_owner = fi->lock_owner;
    // A landed payload is not in `buf`; its size is the request's (ReadLandingWrites checks).
    LandedBytes* landed = LandedPayload(buf);
    Result<size_t> r = landed
                           ? Fs(req).Write(fi->fh, static_cast<uint64_t>(off), *landed, caller)
                           : Fs(req).Write(fi->fh, static_cast<uint64_t>(off), buf, size, caller);
    if (!r.ok()) {
      fuse_reply_err(req, r.status().err());
    } else {
      fuse_reply_write(req, *r);
    }
  });
}

void Flush(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  Guard(req, "flush", [&] { ReplyStatus(req, Fs(req).Flush(fi->fh, fi->lock_owner)); });
}

void Release(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  Guard(req, "release", [&] { ReplyStatus(req, Fs(req).Release(fi->fh)); });
}

void Fsync(fuse_req_t req, fuse_ino_t, int, fuse_file_info* fi) {
  Guard(req, "fsync", [&] { ReplyStatus(req, Fs(req).Fsync(fi->fh)); });
}

void Fallocate(fuse_req_t req, fuse_ino_t, int mode, off_t offset, off_t length,
               fuse_file_info* fi) {
  Guard(req, "fallocate", [&] {
    ReplyStatus(req, Fs(req).Fallocate(fi->fh, mode, static_cast<uint64_t>(offset),
                                       static_cast<uint64_t>(length)));
  });
}

void OpenDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Guard(req, "opendir", [&] {
    Result<uint64_t> r = Fs(req).OpenDir(ino);
    if (!r.ok()) {
      fuse_reply_err(req, r.status().err());
      return;
    }
    fi->fh = *r;
    Filesystem& fs = Fs(req);  // A reply frees `req`, whether or not it reached the kernel.
    if (fuse_reply_open(req, fi) != 0) fs.ReleaseDir(*r);
  });
}

void ReadDir(fuse_req_t req, fuse_ino_t, size_t size, off_t off, fuse_file_info* fi) {
  Guard(req, "readdir", [&] {
    Result<std::vector<DirEntry>> r = Fs(req).ReadDir(fi->fh, static_cast<uint64_t>(off));
    if (!r.ok()) {
      fuse_reply_err(req, r.status().err());
      return;
    }
    std::vector<char> buf(size);
    size_t used = 0;
    off_t next = off;
    for (const DirEntry& d : *r) {
      struct stat st {};
      st.st_ino = d.ino;
      st.st_mode = d.type_bits;
      ++next;
      size_t n = fuse_add_direntry(req, buf.data() + used, size - used, d.name.c_str(), &st, next);
      if (n > size - used) break;
      used += n;
    }
    fuse_reply_buf(req, buf.data(), used);
  });
}

void ReleaseDir(fuse_req_t req, fuse_ino_t, fuse_file_info* fi) {
  Fs(req).ReleaseDir(fi->fh);
  fuse_reply_err(req, 0);
}

void FsyncDir(fuse_req_t req, fuse_ino_t ino, int, fuse_file_info*) {
  Guard(req, "fsyncdir", [&] { ReplyStatus(req, Fs(req).FsyncDir(ino)); });
}

void StatFs(fuse_req_t req, fuse_ino_t) {
  Guard(req, "statfs", [&] {
    Result<struct statvfs> r = Fs(req).StatFs();
    if (!r.ok()) {
      fuse_reply_err(req, r.status().err());
    } else {
      fuse_reply_statfs(req, &*r);
    }
  });
}

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops {};
  ops.init = Init;
  ops.lookup = Lookup;
  ops.forget = Forget;
  ops.forget_multi = ForgetMulti;
  ops.getattr = GetAttr;
  ops.setattr = SetAttr;
  ops.readlink = Readlink;
  ops.mknod = Mknod;
  ops.mkdir = Mkdir;
  ops.unlink = Unlink;
  ops.rmdir = Rmdir;
  ops.symlink = Symlink;
  ops.rename = Rename;
  ops.link = Link;
  ops.open = Open;
  ops.read = Read;
  ops.write = Write;
  ops.flush = Flush;
  ops.release = Release;
  ops.fsync = Fsync;
  ops.opendir = OpenDir;
  ops.readdir = ReadDir;
  ops.releasedir = ReleaseDir;
  ops.fsyncdir = FsyncDir;
  ops.statfs = StatFs;
  ops.create = Create;
  ops.fallocate = Fallocate;
  return ops;
}

}  // namespace

void ConfigureAdapter(const AdapterOptions& options) { adapter_options = options; }

const fuse_lowlevel_ops& FuseOperations() {
  static const fuse_lowlevel_ops ops = MakeOps();
  return ops;
}

}  // namespace ckptfs
