// The zarr fine grid in the namespace: which directories are served with one, the files that
// show virtual chunks, and how clients' renames and unlinks of them change the real chunks.
#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <nlohmann/json.hpp>

#include "core/filesystem.h"

namespace ckptfs {
namespace {

constexpr uint64_t kMaxZarrayBytes = 1 << 20;
constexpr const char* kZarray = ".zarray";

timespec Now() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return ts;
}

// The whole content of a small file (`inode.mu` held), or nothing when it is too large or
// cannot be read.
std::optional<std::string> SmallText(const Inode& inode) REQUIRES(inode.mu) {
  if (inode.content.size() > kMaxZarrayBytes) return std::nullopt;
  std::string text(inode.content.size(), '\0');
  Result<size_t> n = inode.content.ReadInto(0, text.size(), text.data());
  if (!n.ok() || *n != text.size()) return std::nullopt;
  return text;
}

}  // namespace

std::optional<ZarrGrid> Filesystem::ZarrGridFor(const InodeRef& dir, const std::string& text,
                                                const ZarrGrid* keep) const {
  Result<ZarrGrid> grid = ZarrGrid::Parse(text, config_.zarr_chunk, keep);
  if (!grid.ok()) {
    auto level = grid.status().err() == EBADMSG ? spdlog::level::warn : spdlog::level::debug;
    spdlog::log(level, "{}: served as plain files: {}", PathLocked(dir), grid.status().message());
    return std::nullopt;
  }
  if (!grid->zero_fill() && grid->chunk_bytes() > config_.cache_size / 4) {
    spdlog::info("{}: served as plain files: a chunk filled with its fill value needs more than "
                 "a quarter of cache_size", PathLocked(dir));
    return std::nullopt;
  }
  return std::move(*grid);
}

void Filesystem::ZarrProbeLocked(const InodeRef& dir) {
  std::shared_ptr<BackingFile> backing = dir->BackingDir();
  if (config_.zarr_chunk == 0 || !backing) return;
  Result<int> fd = env_->Open(backing->fd(), kZarray, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  if (!fd.ok()) return;
  BackingFile file(*env_, *fd);
  struct stat st {};
  if (!env_->Stat(*fd, "", &st).ok() || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) > kMaxZarrayBytes) {
    return;
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  if (!file.Read(text.data(), text.size(), 0).ok()) return;
  std::optional<ZarrGrid> grid = ZarrGridFor(dir, text);
  if (!grid) return;
  dir->zarr = std::make_shared<ZarrArray>(std::move(*grid));
  LoadDirLocked(dir);
  if (auto it = dir->children.find(kZarray); it != dir->children.end()) {
    MutexLock lock(it->second->mu);
    it->second->served_text = dir->zarr->grid.VirtualText(text);
  }
  zarr_dirs_.push_back(dir);
}

void Filesystem::ZarrAdoptLocked(const InodeRef& dir, const InodeRef& zarray) {
  if (config_.zarr_chunk == 0) return;
  std::optional<std::string> text;
  {
    MutexLock lock(zarray->mu);
    text = SmallText(*zarray);
  }
  if (!text) return;
  std::optional<ZarrGrid> grid = ZarrGridFor(dir, *text);
  if (!grid) return;
  LoadDirLocked(dir);
  for (const auto& [name, child] : dir->children) {
    if (grid->IsRealKey(name) || grid->Virtual(name)) {
      spdlog::info("{}: served as plain files: chunk files were written before .zarray",
                   PathLocked(dir));
      return;
    }
  }
  {
    MutexLock lock(zarray->mu);
    zarray->served_text = grid->VirtualText(*text);
  }
  dir->zarr = std::make_shared<ZarrArray>(std::move(*grid));
  zarr_dirs_.push_back(dir);
}

bool Filesystem::ZarrAddBackingLocked(const InodeRef& dir, const std::string& name) {
  std::shared_ptr<ZarrArray> array = dir->zarr;
  const ZarrGrid& grid = array->grid;
  if (grid.IsRealKey(name)) {
    Result<InodeRef> file = BackingInodeLocked(dir, name);
    if (!file.ok()) return true;
    bool whole;
    {
      MutexLock lock((*file)->mu);
      whole = (*file)->type == FileType::kRegular && (*file)->content.size() == grid.chunk_bytes();
    }
    if (!whole || !(*file)->names.empty()) {
      spdlog::warn("{}/{}: not a chunk of {} bytes: not shown", PathLocked(dir), name,
                   grid.chunk_bytes());
      if ((*file)->names.empty()) inodes_.erase((*file)->ino);
      array->hidden++;
      return true;
    }
    (*file)->names.insert({dir, name});
    ZarrArray::Chunk& chunk = array->chunks[name];
    chunk.file = *file;
    chunk.present.assign(grid.subs_per_chunk(), false);
    for (size_t sub = 0; sub < grid.subs_per_chunk(); ++sub) {
      if (grid.VirtualKey(name, sub)) ZarrShowLocked(dir, name, sub);
    }
    return true;
  }
  if (grid.Virtual(name)) {
    array->hidden++;  // Shadowed by a virtual chunk of the same name.
    return true;
  }
  return false;
}

void Filesystem::ZarrShowLocked(const InodeRef& dir, const std::string& real_key, size_t sub) {
  ZarrArray& array = *dir->zarr;
  std::optional<std::string> key = array.grid.VirtualKey(real_key, sub);
  if (!key) return;
  ZarrArray::Chunk& chunk = array.chunks.at(real_key);
  chunk.present[sub] = true;
  auto inode = std::make_shared<Inode>(next_ino_++, FileType::kRegular);
  Attr attr;
  {
    MutexLock lock(chunk.file->mu);
    attr = Attr{.mode = chunk.file->mode, .uid = chunk.file->uid, .gid = chunk.file->gid,
                .atime = chunk.file->atime, .mtime = chunk.file->mtime, .ctime = chunk.file->ctime};
  }
  VirtualChunk vc = *array.grid.Virtual(*key);
  MutexLock lock(inode->mu);
  inode->mode = attr.mode;
  inode->uid = attr.uid;
  inode->gid = attr.gid;
  inode->atime = attr.atime;
  inode->mtime = attr.mtime;
  inode->ctime = attr.ctime;
  inode->content = FileContent(nullptr, vc.length);
  inode->view = std::make_shared<ChunkView>(ChunkView{chunk.file, std::move(vc), array.grid.fill()});
  inodes_[inode->ino] = inode;
  dir->children[*key] = inode;
  inode->names.insert({dir, *key});
}

Status Filesystem::ZarrRenameInLocked(const InodeRef& src_dir, const std::string& src_name,
                                      const InodeRef& file, const InodeRef& dir,
                                      const std::string& key, const VirtualChunk& vc,
                                      Reservation& reservation, size_t& more) {
  std::shared_ptr<ZarrArray> array = dir->zarr;
  const ZarrGrid& grid = array->grid;
  Status st = LoadOriginLocked(file);
  if (!st.ok()) return st;
  FileContent data;
  uint32_t mode;
  Caller owner;
  {
    MutexLock lock(file->mu);
    data = file->content;
    mode = file->mode;
    owner = Caller{file->uid, file->gid, 0};
  }
  if (data.size() != vc.length) {
    spdlog::warn("{}/{}: a chunk of this array has {} bytes, not {}", PathLocked(dir), key,
                 vc.length, data.size());
    return Status::Error(EINVAL, key + ": wrong size for a chunk");
  }
  auto it = array->chunks.find(vc.real_key);
  InodeRef real = it == array->chunks.end() ? nullptr : it->second.file;
  size_t needed;
  if (real) {
    st = LoadOriginLocked(real);
    if (!st.ok()) return st;
    MutexLock lock(real->mu);
    needed = real->content.BlocksNeededForSplice(vc.offset, data, vc.stored);
  } else if (grid.zero_fill()) {
    FileContent fresh;
    Reservation none;
    fresh.Truncate(grid.chunk_bytes(), none);
    needed = fresh.BlocksNeededForSplice(vc.offset, data, vc.stored);
  } else {
    needed = (grid.chunk_bytes() + kBlockSize - 1) / kBlockSize;
  }
  if (reservation.count() < needed) {
    more = needed;
    return Status::Ok();
  }
  if (!real) {
    // A new real chunk: what zarr starts a chunk with, the fill value.
    real = NewInodeLocked(FileType::kRegular, mode, owner);
    {
      MutexLock lock(real->mu);
      real->version = 1;
      real->content.Truncate(grid.chunk_bytes(), reservation);
      if (!grid.zero_fill()) {
        st = ZarrFill(*real, 0, grid.chunk_bytes(), grid.fill(), reservation);
        if (!st.ok()) return st;
      }
    }
    real->names.insert({dir, vc.real_key});
    ZarrArray::Chunk& chunk = array->chunks[vc.real_key];
    chunk.file = real;
    chunk.present.assign(grid.subs_per_chunk(), false);
  }
  {
    MutexLock lock(real->mu);
    st = real->content.Splice(vc.offset, data, vc.stored, reservation);
    if (!st.ok()) return st;
    real->version++;
    real->mtime = real->ctime = Now();
  }
  array->chunks[vc.real_key].present[vc.sub] = true;
  // The temporary name goes as if unlinked...
  RemoveNameLocked(src_dir, src_name, file);
  file->nlink--;
  stats_.versions_skipped += journal_.CancelUnsent(file);
  // ...and the file is what the mount shows as chunk `key` from now on: the kernel has moved it
  // there, with the bytes it wrote in its page cache.
  if (auto old = dir->children.find(key); old != dir->children.end()) {
    InodeRef previous = old->second;
    RemoveNameLocked(dir, key, previous, /*journal=*/false);
    previous->nlink = 0;
    MaybeDropLocked(previous);
  }
  {
    MutexLock lock(file->mu);
    file->content = FileContent(nullptr, vc.length);
    file->view = std::make_shared<ChunkView>(ChunkView{real, vc, grid.fill()});
    file->ctime = Now();
  }
  real->open_handles += file->open_handles;
  file->on_backing = false;
  file->origin_dir.reset();
  file->nlink = 1;
  AddNameLocked(dir, key, file);
  SealLocked(real);
  return Status::Ok();
}

Status Filesystem::ZarrCheckZarrayLocked(const InodeRef& dir, const InodeRef& file,
                                         Reservation& reservation, size_t& more) {
  const ZarrArray& array = *dir->zarr;
  Status st = LoadOriginLocked(file);
  if (!st.ok()) return st;
  std::optional<std::string> text;
  {
    MutexLock lock(file->mu);
    text = SmallText(*file);
  }
  std::optional<std::string> real_text = text ? array.grid.RealText(*text) : std::nullopt;
  std::optional<ZarrGrid> grid =
      ZarrGridFor(dir, real_text ? *real_text : text.value_or(""), &array.grid);
  if (!array.chunks.empty() && !(grid && grid->SameLayout(array.grid))) {
    return Status::Error(EBUSY, PathLocked(dir) + ": a new .zarray must keep the chunks");
  }
  size_t needed = real_text ? (real_text->size() + kBlockSize - 1) / kBlockSize : 0;
  if (reservation.count() < needed) more = needed;
  return Status::Ok();
}

void Filesystem::ZarrZarrayReplacedLocked(const InodeRef& dir, const InodeRef& zarray,
                                          Reservation& reservation) {
  std::optional<std::string> text;
  {
    MutexLock lock(zarray->mu);
    text = SmallText(*zarray);
  }
  std::optional<std::string> real_text = text ? dir->zarr->grid.RealText(*text) : std::nullopt;
  if (real_text) {
    // The client wrote the virtual chunks: the backing store gets the real ones.
    {
      MutexLock lock(zarray->mu);
      zarray->content = FileContent();
      Status st = zarray->content.Write(0, real_text->data(), real_text->size(), reservation);
      if (!st.ok()) spdlog::error("{}/.zarray: {}", PathLocked(dir), st.ToString());
      zarray->version++;
    }
    SealLocked(zarray);
  }
  const std::string& stored = real_text ? *real_text : text.value_or("");
  std::optional<ZarrGrid> grid = ZarrGridFor(dir, stored, &dir->zarr->grid);
  if (!grid || !grid->SameLayout(dir->zarr->grid)) {
    dir->zarr.reset();  // No chunks (checked before the rename): a plain directory again.
    if (grid) ZarrAdoptLocked(dir, zarray);
    return;
  }
  // A new shape: virtual chunks of existing real chunks that come inside it appear. Those that
  // fall outside stay until removed, as chunk files of a plain directory do (zarr's resize
  // removes them itself).
  std::shared_ptr<ZarrArray> array = dir->zarr;
  const ZarrGrid old = std::exchange(array->grid, std::move(*grid));
  {
    MutexLock lock(zarray->mu);
    zarray->served_text = array->grid.VirtualText(stored);
  }
  for (auto& [real_key, chunk] : array->chunks) {
    for (size_t sub = 0; sub < chunk.present.size(); ++sub) {
      std::optional<std::string> key = array->grid.VirtualKey(real_key, sub);
      if (key && !old.VirtualKey(real_key, sub) && !dir->children.count(*key)) {
        ZarrShowLocked(dir, real_key, sub);
      }
    }
  }
}

Status Filesystem::ZarrUnlinkLocked(const InodeRef& dir, const std::string& key,
                                    const InodeRef& inode, Reservation& reservation,
                                    size_t& more) {
  std::shared_ptr<ZarrArray> array = dir->zarr;
  std::shared_ptr<const ChunkView> view;
  {
    MutexLock lock(inode->mu);
    view = inode->view;
  }
  ZarrArray::Chunk& chunk = array->chunks.at(view->chunk.real_key);
  const size_t others = static_cast<size_t>(std::count(chunk.present.begin(), chunk.present.end(), true)) -
                        (chunk.present[view->chunk.sub] ? 1 : 0);
  if (others > 0) {
    // The real chunk stays: this range of it becomes what zarr reads for a missing chunk.
    Status st = LoadOriginLocked(view->real);
    if (!st.ok()) return st;
    st = ZarrFillView(*view, reservation, more);
    if (!st.ok() || more > 0) return st;
    SealLocked(view->real);
  }
  chunk.present[view->chunk.sub] = false;
  RemoveNameLocked(dir, key, inode, /*journal=*/false);
  inode->nlink = 0;
  {
    MutexLock lock(inode->mu);
    inode->ctime = Now();
  }
  MaybeDropLocked(inode);
  if (others == 0) ZarrRemoveChunkLocked(dir, view->chunk.real_key);
  return Status::Ok();
}

void Filesystem::ZarrRemoveChunkLocked(const InodeRef& dir, const std::string& real_key) {
  std::shared_ptr<ZarrArray> array = dir->zarr;
  auto it = array->chunks.find(real_key);
  InodeRef real = it->second.file;
  array->chunks.erase(it);
  JournalRemovalLocked(dir, real_key, real);
  real->names.erase({dir, real_key});
  real->nlink = 0;
  stats_.versions_skipped += journal_.CancelUnsent(real);
  MaybeDropLocked(real);
  ZarrForgetIfGoneLocked(dir);
}

void Filesystem::ZarrForgetIfGoneLocked(const InodeRef& dir) {
  if (dir->zarr && dir->zarr->chunks.empty() && !dir->children.count(kZarray)) {
    dir->zarr.reset();  // Nothing of the array is left: a plain directory again.
  }
}

Status Filesystem::ZarrFillView(const ChunkView& view, Reservation& reservation, size_t& more) {
  MutexLock lock(view.real->mu);
  size_t needed = view.real->content.BlocksNeededForWrite(view.chunk.offset, view.chunk.stored);
  if (reservation.count() < needed) {
    more = needed;
    return Status::Ok();
  }
  return ZarrFill(*view.real, view.chunk.offset, view.chunk.stored, view.fill, reservation);
}

Status Filesystem::ZarrFill(Inode& real, uint64_t offset, uint64_t length, const std::string& fill,
                            Reservation& reservation) {
  std::string pattern(kBlockSize, '\0');
  if (fill.find_first_not_of('\0') != std::string::npos) {
    for (size_t i = 0; i < pattern.size(); ++i) pattern[i] = fill[i % fill.size()];
  }
  for (uint64_t pos = 0; pos < length;) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(kBlockSize, length - pos));
    Status st = real.content.Write(offset + pos, pattern.data(), n, reservation);
    if (!st.ok()) return st;
    pos += n;
  }
  real.version++;
  real.mtime = real.ctime = Now();
  return Status::Ok();
}

Result<ReadData> Filesystem::ZarrRead(const ChunkView& view, uint64_t offset, size_t size) {
  const VirtualChunk& vc = view.chunk;
  ReadData out;
  if (offset >= vc.length) return out;
  size = static_cast<size_t>(std::min<uint64_t>(size, vc.length - offset));
  if (offset + size <= vc.stored) {
    MutexLock lock(view.real->mu);
    out.segments = view.real->content.Read(vc.offset + offset, size);
    return out;
  }
  // Reaches the padding past the real chunk's end: served as the fill value.
  out.owned.resize(size);
  size_t stored = offset < vc.stored ? static_cast<size_t>(vc.stored - offset) : 0;
  if (stored > 0) {
    MutexLock lock(view.real->mu);
    Result<size_t> n = view.real->content.ReadInto(vc.offset + offset, stored, out.owned.data());
    if (!n.ok()) return n.status();
  }
  for (size_t i = stored; i < size; ++i) out.owned[i] = view.fill[(offset + i) % view.fill.size()];
  return out;
}

nlohmann::json Filesystem::ZarrStatsLocked() const {
  nlohmann::json arrays = nlohmann::json::array();
  for (const std::weak_ptr<Inode>& weak : zarr_dirs_) {
    InodeRef dir = weak.lock();
    if (!dir || !dir->zarr || (dir->names.empty() && dir->ino != kRootIno)) continue;
    const ZarrArray& array = *dir->zarr;
    arrays.push_back({{"path", PathLocked(dir)},
                      {"dtype", array.grid.dtype()},
                      {"chunks", array.grid.chunks()},
                      {"virtual_chunks", array.grid.virtual_chunks()},
                      {"real_chunks", array.chunks.size()}});
  }
  return arrays;
}

}  // namespace ckptfs
