#include "core/views/zarr_views.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <utility>
#include <nlohmann/json.hpp>

namespace ckptfs {
namespace {

constexpr uint64_t kMaxZarrayBytes = 1 << 20;
constexpr const char* kZarray = ".zarray";

// The whole content of a small file (`inode.mu` held), or nothing when it is too large or
// cannot be read.
std::optional<std::string> SmallText(const Inode& inode) REQUIRES(inode.mu) {
  if (inode.content.size() > kMaxZarrayBytes) return std::nullopt;
  std::string text(inode.content.size(), '\0');
  Result<size_t> n = inode.content.ReadInto(0, text.size(), text.data());
  if (!n.ok() || *n != text.size()) return std::nullopt;
  return text;
}

// Whether `temp` is the name zarr gives the temporary file it renames to `name`.
bool IsZarrTempName(const std::string& temp, const std::string& name) {
  constexpr size_t kUuidHex = 32;
  constexpr std::string_view kSuffix = ".partial";
  if (temp.size() != name.size() + 1 + kUuidHex + kSuffix.size()) return false;
  std::string_view t = temp;
  return t.substr(0, name.size() + 1) == name + "." && t.substr(t.size() - kSuffix.size()) == kSuffix &&
         t.substr(name.size() + 1, kUuidHex).find_first_not_of("0123456789abcdef") ==
             std::string_view::npos;
}

}  // namespace

bool IsZarrView(const Inode& inode) {
  MutexLock lock(inode.mu);
  return IsZarrViewLocked(inode);
}

ZarrViews::ZarrViews(const Config& config, Env& env, Namespace& ns)
    : config_(config), env_(env), ns_(ns) {
  ns_.SetDirectoryKind(this);
}

Status ZarrViews::MayCreateLocked(const InodeRef& dir, const std::string& name) {
  if (dir->zarr && dir->zarr->grid.Virtual(name)) {
    return Status::Error(EPERM, name + " is a chunk of a zarr array");
  }
  return Status::Ok();
}

Result<ZarrViews::Opened> ZarrViews::OpenLocked(const InodeRef& inode, int flags,
                                                Reservation& reservation, size_t& more) {
  std::shared_ptr<const ChunkView> view;
  {
    MutexLock lock(inode->mu);
    view = inode->view;
  }
  if (!view) {
    // A served .zarray: rewritten by zarr with a rename.
    if ((flags & O_ACCMODE) != O_RDONLY) return Status::Error(EACCES, "the .zarray of a fine grid");
    return Opened{.text = true, .wrote_version = 0};
  }
  if (flags & O_APPEND) return Status::Error(EINVAL, "append to a zarr chunk");
  Status st = ns_.LoadOriginLocked(view->real);
  if (!st.ok()) return st;
  Opened opened;
  if ((flags & O_TRUNC) && (flags & O_ACCMODE) != O_RDONLY) {
    st = FillView(*view, reservation, more);
    if (!st.ok() || more > 0) return st;
    MutexLock lock(view->real->mu);
    opened.wrote_version = view->real->version;
  }
  view->real->open_handles++;
  return opened;
}

Result<ReadData> ZarrViews::Read(const Inode& inode, uint64_t offset, size_t size) {
  std::shared_ptr<const ChunkView> view;
  {
    MutexLock lock(inode.mu);
    if (!inode.view) {
      ReadData out;
      if (offset < inode.served_text.size()) out.owned = inode.served_text.substr(offset, size);
      return out;
    }
    view = inode.view;
  }
  return ReadChunk(*view, offset, size);
}

Result<ZarrViews::Target> ZarrViews::WriteTarget(const ChunkView& view, uint64_t offset,
                                                 size_t size) {
  const VirtualChunk& vc = view.chunk;
  if (offset + size > vc.length) return Status::Error(EFBIG, "past the end of a zarr chunk");
  return Target{vc.offset + offset,
                offset >= vc.stored
                    ? 0
                    : static_cast<size_t>(std::min<uint64_t>(size, vc.stored - offset))};
}

Status ZarrViews::RenameLocked(const InodeRef& src_dir, const std::string& src_name,
                               const InodeRef& file, const InodeRef& dst,
                               const std::string& new_name, bool* handled,
                               Reservation& reservation, size_t& more) {
  *handled = false;
  // What the mount shows of a fine-grid array is not a file of its own: mv copies it instead.
  if (IsZarrView(*file)) return Status::Error(EXDEV, src_name + " is a view of a zarr array");
  const std::shared_ptr<ZarrArray>& array = dst->zarr;
  if (!array) return Status::Ok();
  if (auto vc = array->grid.Virtual(new_name)) {
    if (file->type != FileType::kRegular) return Status::Error(EPERM, new_name + " is a chunk");
    *handled = true;
    return RenameInLocked(src_dir, src_name, file, dst, new_name, *vc, reservation, more);
  }
  if (new_name == kZarray && file->type == FileType::kRegular) {
    return CheckZarrayLocked(dst, file, reservation, more);
  }
  return Status::Ok();
}

void ZarrViews::RenamedLocked(const InodeRef& src_dir, const std::string& src_name,
                              const InodeRef& file, const InodeRef& dst,
                              const std::string& new_name, Reservation& reservation) {
  if (new_name != kZarray || file->type != FileType::kRegular) return;
  if (dst->zarr) {
    ZarrayReplacedLocked(dst, file, reservation);
  } else if (src_dir == dst && IsZarrTempName(src_name, new_name)) {
    AdoptLocked(dst, file);
  }
}

Status ZarrViews::RmdirLocked(const InodeRef& dir) {
  if (dir->zarr && dir->zarr->hidden > 0) return Status::Error(ENOTEMPTY, "hidden chunk files");
  dir->zarr.reset();
  return Status::Ok();
}

std::optional<ZarrGrid> ZarrViews::GridFor(const InodeRef& dir, const std::string& text,
                                                const ZarrGrid* keep) const {
  Result<ZarrGrid> grid = ZarrGrid::Parse(text, config_.zarr_chunk, keep);
  if (!grid.ok()) {
    auto level = grid.status().err() == EBADMSG ? spdlog::level::warn : spdlog::level::debug;
    spdlog::log(level, "{}: served as plain files: {}", ns_.PathLocked(dir), grid.status().message());
    return std::nullopt;
  }
  if (!grid->zero_fill() && grid->chunk_bytes() > config_.cache_size / 4) {
    spdlog::info("{}: served as plain files: a chunk filled with its fill value needs more than "
                 "a quarter of cache_size", ns_.PathLocked(dir));
    return std::nullopt;
  }
  return std::move(*grid);
}

void ZarrViews::FoundLocked(const InodeRef& dir) {
  std::shared_ptr<BackingFile> backing = dir->BackingDir();
  if (config_.zarr_chunk == 0 || !backing) return;
  Result<int> fd = env_.Open(backing->fd(), kZarray, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  if (!fd.ok()) return;
  BackingFile file(env_, *fd);
  struct stat st {};
  if (!env_.Stat(*fd, "", &st).ok() || !S_ISREG(st.st_mode) ||
      static_cast<uint64_t>(st.st_size) > kMaxZarrayBytes) {
    return;
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  if (!file.Read(text.data(), text.size(), 0).ok()) return;
  std::optional<ZarrGrid> grid = GridFor(dir, text);
  if (!grid) return;
  dir->zarr = std::make_shared<ZarrArray>(std::move(*grid));
  ns_.LoadDirLocked(dir);
  if (auto it = dir->children.find(kZarray); it != dir->children.end()) {
    MutexLock lock(it->second->mu);
    it->second->served_text = dir->zarr->grid.VirtualText(text);
  }
  dirs_.push_back(dir);
}

void ZarrViews::AdoptLocked(const InodeRef& dir, const InodeRef& zarray) {
  if (config_.zarr_chunk == 0) return;
  std::optional<std::string> text;
  {
    MutexLock lock(zarray->mu);
    text = SmallText(*zarray);
  }
  if (!text) return;
  std::optional<ZarrGrid> grid = GridFor(dir, *text);
  if (!grid) return;
  ns_.LoadDirLocked(dir);
  for (const auto& [name, child] : dir->children) {
    if (grid->IsRealKey(name) || grid->Virtual(name)) {
      spdlog::info("{}: served as plain files: chunk files were written before .zarray",
                   ns_.PathLocked(dir));
      return;
    }
  }
  {
    MutexLock lock(zarray->mu);
    zarray->served_text = grid->VirtualText(*text);
  }
  dir->zarr = std::make_shared<ZarrArray>(std::move(*grid));
  dirs_.push_back(dir);
}

bool ZarrViews::TakeBackingEntryLocked(const InodeRef& dir, const std::string& name) {
  std::shared_ptr<ZarrArray> array = dir->zarr;
  if (!array) return false;
  const ZarrGrid& grid = array->grid;
  if (grid.IsRealKey(name)) {
    Result<InodeRef> file = ns_.BackingInodeLocked(dir, name);
    if (!file.ok()) return true;
    bool whole;
    {
      MutexLock lock((*file)->mu);
      whole = (*file)->type == FileType::kRegular && (*file)->content.size() == grid.chunk_bytes();
    }
    if (!whole || !(*file)->names.empty()) {
      spdlog::warn("{}/{}: not a chunk of {} bytes: not shown", ns_.PathLocked(dir), name,
                   grid.chunk_bytes());
      if ((*file)->names.empty()) ns_.EraseLocked((*file)->ino);
      array->hidden++;
      return true;
    }
    (*file)->names.insert({dir, name});
    ZarrArray::Chunk& chunk = array->chunks[name];
    chunk.file = *file;
    chunk.present.assign(grid.subs_per_chunk(), false);
    for (size_t sub = 0; sub < grid.subs_per_chunk(); ++sub) {
      if (grid.VirtualKey(name, sub)) ShowLocked(dir, name, sub);
    }
    return true;
  }
  if (grid.Virtual(name)) {
    array->hidden++;  // Shadowed by a virtual chunk of the same name.
    return true;
  }
  return false;
}

void ZarrViews::ShowLocked(const InodeRef& dir, const std::string& real_key, size_t sub) {
  ZarrArray& array = *dir->zarr;
  std::optional<std::string> key = array.grid.VirtualKey(real_key, sub);
  if (!key) return;
  ZarrArray::Chunk& chunk = array.chunks.at(real_key);
  chunk.present[sub] = true;
  InodeRef inode = ns_.MakeInodeLocked(FileType::kRegular);
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
  inode->content_owner = chunk.file;
  dir->children[*key] = inode;
  inode->names.insert({dir, *key});
}

Status ZarrViews::RenameInLocked(const InodeRef& src_dir, const std::string& src_name,
                                      const InodeRef& file, const InodeRef& dir,
                                      const std::string& key, const VirtualChunk& vc,
                                      Reservation& reservation, size_t& more) {
  std::shared_ptr<ZarrArray> array = dir->zarr;
  const ZarrGrid& grid = array->grid;
  Status st = ns_.LoadOriginLocked(file);
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
    spdlog::warn("{}/{}: a chunk of this array has {} bytes, not {}", ns_.PathLocked(dir), key,
                 vc.length, data.size());
    return Status::Error(EINVAL, key + ": wrong size for a chunk");
  }
  auto it = array->chunks.find(vc.real_key);
  InodeRef real = it == array->chunks.end() ? nullptr : it->second.file;
  size_t needed;
  if (real) {
    st = ns_.LoadOriginLocked(real);
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
    real = ns_.NewInodeLocked(FileType::kRegular, mode, owner);
    {
      MutexLock lock(real->mu);
      real->version = 1;
      real->content.Truncate(grid.chunk_bytes(), reservation);
      if (!grid.zero_fill()) {
        st = Fill(*real, 0, grid.chunk_bytes(), grid.fill(), reservation);
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
    real->mtime = real->ctime = WallTime();
  }
  array->chunks[vc.real_key].present[vc.sub] = true;
  // The temporary name goes as if unlinked...
  ns_.RemoveNameLocked(src_dir, src_name, file);
  file->nlink--;
  ns_.CancelUnsentLocked(file);
  // ...and the file is what the mount shows as chunk `key` from now on: the kernel has moved it
  // there, with the bytes it wrote in its page cache.
  if (auto old = dir->children.find(key); old != dir->children.end()) {
    InodeRef previous = old->second;
    ns_.RemoveNameLocked(dir, key, previous, /*journal=*/false);
    previous->nlink = 0;
    ns_.MaybeDropLocked(previous);
  }
  {
    MutexLock lock(file->mu);
    file->content = FileContent(nullptr, vc.length);
    file->view = std::make_shared<ChunkView>(ChunkView{real, vc, grid.fill()});
    file->content_owner = real;
    file->ctime = WallTime();
  }
  real->open_handles += file->open_handles;
  file->on_backing = false;
  file->origin_dir.reset();
  file->nlink = 1;
  ns_.AddNameLocked(dir, key, file);
  ns_.SealLocked(real);
  return Status::Ok();
}

Status ZarrViews::CheckZarrayLocked(const InodeRef& dir, const InodeRef& file,
                                         Reservation& reservation, size_t& more) {
  const ZarrArray& array = *dir->zarr;
  Status st = ns_.LoadOriginLocked(file);
  if (!st.ok()) return st;
  std::optional<std::string> text;
  {
    MutexLock lock(file->mu);
    text = SmallText(*file);
  }
  std::optional<std::string> real_text = text ? array.grid.RealText(*text) : std::nullopt;
  std::optional<ZarrGrid> grid =
      GridFor(dir, real_text ? *real_text : text.value_or(""), &array.grid);
  if (!array.chunks.empty() && !(grid && grid->SameLayout(array.grid))) {
    return Status::Error(EBUSY, ns_.PathLocked(dir) + ": a new .zarray must keep the chunks");
  }
  size_t needed = real_text ? (real_text->size() + kBlockSize - 1) / kBlockSize : 0;
  if (reservation.count() < needed) more = needed;
  return Status::Ok();
}

void ZarrViews::ZarrayReplacedLocked(const InodeRef& dir, const InodeRef& zarray,
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
      if (!st.ok()) spdlog::error("{}/.zarray: {}", ns_.PathLocked(dir), st.ToString());
      zarray->version++;
    }
    ns_.SealLocked(zarray);
  }
  const std::string& stored = real_text ? *real_text : text.value_or("");
  std::optional<ZarrGrid> grid = GridFor(dir, stored, &dir->zarr->grid);
  if (!grid || !grid->SameLayout(dir->zarr->grid)) {
    dir->zarr.reset();  // No chunks (checked before the rename): a plain directory again.
    if (grid) AdoptLocked(dir, zarray);
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
        ShowLocked(dir, real_key, sub);
      }
    }
  }
}

Status ZarrViews::UnlinkLocked(const InodeRef& dir, const std::string& key,
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
    Status st = ns_.LoadOriginLocked(view->real);
    if (!st.ok()) return st;
    st = FillView(*view, reservation, more);
    if (!st.ok() || more > 0) return st;
    ns_.SealLocked(view->real);
  }
  chunk.present[view->chunk.sub] = false;
  ns_.RemoveNameLocked(dir, key, inode, /*journal=*/false);
  inode->nlink = 0;
  {
    MutexLock lock(inode->mu);
    inode->ctime = WallTime();
  }
  ns_.MaybeDropLocked(inode);
  if (others == 0) RemoveChunkLocked(dir, view->chunk.real_key);
  return Status::Ok();
}

void ZarrViews::RemoveChunkLocked(const InodeRef& dir, const std::string& real_key) {
  std::shared_ptr<ZarrArray> array = dir->zarr;
  auto it = array->chunks.find(real_key);
  InodeRef real = it->second.file;
  array->chunks.erase(it);
  ns_.JournalRemovalLocked(dir, real_key, real);
  real->names.erase({dir, real_key});
  real->nlink = 0;
  ns_.CancelUnsentLocked(real);
  ns_.MaybeDropLocked(real);
  ForgetIfGoneLocked(dir);
}

void ZarrViews::ForgetIfGoneLocked(const InodeRef& dir) {
  if (dir->zarr && dir->zarr->chunks.empty() && !dir->children.count(kZarray)) {
    dir->zarr.reset();  // Nothing of the array is left: a plain directory again.
  }
}

Status ZarrViews::FillView(const ChunkView& view, Reservation& reservation, size_t& more) {
  MutexLock lock(view.real->mu);
  size_t needed = view.real->content.BlocksNeededForWrite(view.chunk.offset, view.chunk.stored);
  if (reservation.count() < needed) {
    more = needed;
    return Status::Ok();
  }
  return Fill(*view.real, view.chunk.offset, view.chunk.stored, view.fill, reservation);
}

Status ZarrViews::Fill(Inode& real, uint64_t offset, uint64_t length, const std::string& fill,
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
  real.mtime = real.ctime = WallTime();
  return Status::Ok();
}

Result<ReadData> ZarrViews::ReadChunk(const ChunkView& view, uint64_t offset, size_t size) {
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

nlohmann::json ZarrViews::StatsLocked() const {
  nlohmann::json arrays = nlohmann::json::array();
  for (const std::weak_ptr<Inode>& weak : dirs_) {
    InodeRef dir = weak.lock();
    if (!dir || !dir->zarr || (dir->names.empty() && dir->ino != kRootIno)) continue;
    const ZarrArray& array = *dir->zarr;
    arrays.push_back({{"path", ns_.PathLocked(dir)},
                      {"dtype", array.grid.dtype()},
                      {"chunks", array.grid.chunks()},
                      {"virtual_chunks", array.grid.virtual_chunks()},
                      {"real_chunks", array.chunks.size()}});
  }
  return arrays;
}

}  // namespace ckptfs
