#include "core/memory/file_content.h"

#include <algorithm>
#include <cstring>

namespace ckptfs {

FileContent::FileContent(uint64_t size, std::vector<std::pair<uint64_t, BlockRef>> blocks,
                         std::shared_ptr<BackingFile> base, uint64_t base_len)
    : size_(size), base_(std::move(base)), base_len_(base_ ? base_len : 0) {
  for (auto& [index, block] : blocks) blocks_.Put(index, std::move(block));
}

size_t FileContent::BlocksNeededForWrite(uint64_t offset, size_t length) const {
  if (length == 0) return 0;
  size_t needed = 0;
  for (uint64_t i = offset / kBlockSize; i <= (offset + length - 1) / kBlockSize; ++i) {
    if (!blocks_.WritableInPlace(i)) ++needed;
  }
  return needed;
}

Status FileContent::FillBlock(uint64_t index, char* dst, size_t skip_from, size_t skip_to) const {
  const uint64_t block_start = index * kBlockSize;
  auto fill = [&](size_t from, size_t to) -> Status {
    if (from >= to) return Status::Ok();
    uint64_t abs_from = block_start + from;
    uint64_t base_end = std::min<uint64_t>(base_len_, block_start + to);
    size_t from_base = abs_from < base_end ? static_cast<size_t>(base_end - abs_from) : 0;
    if (from_base > 0) {
      Status s = base_->Read(dst + from, from_base, abs_from);
      if (!s.ok()) return s;
    }
    std::memset(dst + from + from_base, 0, to - from - from_base);
    return Status::Ok();
  };
  Status s = fill(0, skip_from);
  if (!s.ok()) return s;
  return fill(skip_to, kBlockSize);
}

Status FileContent::Write(uint64_t offset, const char* data, size_t length,
                          Reservation& reservation) {
  uint64_t end = offset + length;
  uint64_t pos = offset;
  while (pos < end) {
    uint64_t index = pos / kBlockSize;
    size_t in_block = static_cast<size_t>(pos % kBlockSize);
    size_t n = static_cast<size_t>(std::min<uint64_t>(kBlockSize - in_block, end - pos));
    BlockRef* block = blocks_.FindMutable(index);
    if (!block) {
      BlockRef fresh = reservation.Take();
      Status s = FillBlock(index, fresh.data(), in_block, in_block + n);
      if (!s.ok()) return s;
      block = &blocks_.Put(index, std::move(fresh));
    } else if (block->shared()) {
      BlockRef copy = reservation.Take();
      std::memcpy(copy.data(), block->data(), kBlockSize);
      *block = std::move(copy);
    }
    std::memcpy(block->data() + in_block, data + (pos - offset), n);
    sums_.Written(pos, block->data() + in_block, n);
    pos += n;
  }
  // Bytes between the old size and `offset` were zero (invariant) or hole: nothing to do.
  size_ = std::max(size_, end);
  CatchUpSums();
  return Status::Ok();
}

void FileContent::CatchUpSums() {
  while (auto range = sums_.NextToCatchUp()) {
    const auto [from, to] = *range;
    const std::vector<ReadSegment> segments = Read(from, static_cast<size_t>(to - from));
    uint64_t readable = 0;
    for (const ReadSegment& seg : segments) {
      if (seg.kind != ReadSegment::Kind::kBacking) readable += seg.length;
    }
    if (readable != to - from) {
      sums_.ForgetPending();
      return;
    }
    uint64_t at = from;
    for (const ReadSegment& seg : segments) {
      sums_.Written(at, seg.kind == ReadSegment::Kind::kMemory ? seg.data : nullptr, seg.length);
      at += seg.length;
    }
  }
}

namespace {

// The block of a splice's source that can be shared for its piece [pos, pos + n), if any.
const BlockRef* SplicedBlock(const BlockMap& src_blocks, uint64_t pos, size_t n) {
  if (n != kBlockSize || pos % kBlockSize != 0) return nullptr;
  return src_blocks.Find(pos / kBlockSize);
}

}  // namespace

size_t FileContent::BlocksNeededForSplice(uint64_t offset, const FileContent& src,
                                          uint64_t length) const {
  size_t needed = 0;
  for (uint64_t pos = 0; pos < length;) {
    uint64_t dst = offset + pos;
    size_t n = static_cast<size_t>(std::min<uint64_t>(kBlockSize - dst % kBlockSize, length - pos));
    if (!SplicedBlock(src.blocks_, pos, n)) needed += BlocksNeededForWrite(dst, n);
    pos += n;
  }
  return needed;
}

Status FileContent::Splice(uint64_t offset, const FileContent& src, uint64_t length,
                           Reservation& reservation) {
  std::vector<char> buf;
  for (uint64_t pos = 0; pos < length;) {
    uint64_t dst = offset + pos;
    size_t n = static_cast<size_t>(std::min<uint64_t>(kBlockSize - dst % kBlockSize, length - pos));
    if (const BlockRef* block = SplicedBlock(src.blocks_, pos, n)) {
      blocks_.Put(dst / kBlockSize, *block);
      size_ = std::max(size_, dst + n);
      sums_.Changed(dst, n);
    } else {
      buf.resize(n);
      Result<size_t> got = src.ReadInto(pos, n, buf.data());
      if (!got.ok()) return got.status();
      Status st = Write(dst, buf.data(), n, reservation);
      if (!st.ok()) return st;
    }
    pos += n;
  }
  CatchUpSums();
  return Status::Ok();
}

void LandedBytes::CopyTo(char* out) const {
  for (size_t done = 0; done < size;) {
    const size_t at = skip + done;
    const size_t n = std::min(kBlockSize - at % kBlockSize, size - done);
    std::memcpy(out + done, blocks[at / kBlockSize].data() + at % kBlockSize, n);
    done += n;
  }
}

std::string LandedBytes::Copied() const {
  std::string bytes(size, '\0');
  CopyTo(bytes.data());
  return bytes;
}

size_t FileContent::BlocksNeededForLand(uint64_t offset, const LandedBytes& landed) const {
  if (landed.skip != offset % kBlockSize) return BlocksNeededForWrite(offset, landed.size);
  size_t needed = 0;
  for (uint64_t pos = offset, end = offset + landed.size; pos < end;) {
    const size_t n =
        static_cast<size_t>(std::min<uint64_t>(kBlockSize - pos % kBlockSize, end - pos));
    if (n != kBlockSize) needed += BlocksNeededForWrite(pos, n);
    pos += n;
  }
  return needed;
}

Result<size_t> FileContent::Land(uint64_t offset, LandedBytes& landed,
                                 Reservation& reservation) {
  const bool in_line = landed.skip == offset % kBlockSize;
  size_t taken = 0;
  // Pieces that end at a landed block's end or at the write's, and (in line) at a file block's.
  for (size_t done = 0; done < landed.size;) {
    const size_t at = landed.skip + done;
    const size_t n = std::min(kBlockSize - at % kBlockSize, landed.size - done);
    BlockRef& block = landed.blocks[at / kBlockSize];
    const uint64_t pos = offset + done;
    if (in_line && n == kBlockSize) {
      sums_.Written(pos, block.data(), n);
      blocks_.Put(pos / kBlockSize, std::move(block));
      size_ = std::max(size_, pos + n);
      ++taken;
    } else {
      Status st = Write(pos, block.data() + at % kBlockSize, n, reservation);
      if (!st.ok()) return st;
    }
    done += n;
  }
  CatchUpSums();
  return taken;
}

std::vector<ReadSegment> FileContent::Read(uint64_t offset, size_t length) const {
  std::vector<ReadSegment> out;
  if (offset >= size_) return out;
  uint64_t end = std::min<uint64_t>(size_, offset + length);
  uint64_t pos = offset;
  while (pos < end) {
    uint64_t index = pos / kBlockSize;
    size_t in_block = static_cast<size_t>(pos % kBlockSize);
    size_t n = static_cast<size_t>(std::min<uint64_t>(kBlockSize - in_block, end - pos));
    ReadSegment seg;
    seg.length = n;
    if (const BlockRef* block = blocks_.Find(index)) {
      seg.kind = ReadSegment::Kind::kMemory;
      seg.block = *block;
      seg.data = block->data() + in_block;
    } else if (pos < base_len_) {
      seg.kind = ReadSegment::Kind::kBacking;
      seg.length = static_cast<size_t>(std::min<uint64_t>(n, base_len_ - pos));
      seg.file = base_;
      seg.file_offset = pos;
    }
    pos += seg.length;
    // Merge with the previous segment where contiguous (large backing reads, long zero runs).
    ReadSegment* last = out.empty() ? nullptr : &out.back();
    bool mergeable = last && seg.kind != ReadSegment::Kind::kMemory && last->kind == seg.kind &&
                     (seg.kind == ReadSegment::Kind::kZeros ||
                      last->file_offset + last->length == seg.file_offset);
    if (mergeable) {
      last->length += seg.length;
    } else {
      out.push_back(std::move(seg));
    }
  }
  return out;
}

Result<size_t> FileContent::ReadInto(uint64_t offset, size_t length, char* out) const {
  size_t done = 0;
  for (const ReadSegment& seg : Read(offset, length)) {
    if (seg.kind == ReadSegment::Kind::kMemory) {
      std::memcpy(out + done, seg.data, seg.length);
    } else if (seg.kind == ReadSegment::Kind::kBacking) {
      Status s = seg.file->Read(out + done, seg.length, seg.file_offset);
      if (!s.ok()) return s;
    } else {
      std::memset(out + done, 0, seg.length);
    }
    done += seg.length;
  }
  return done;
}

size_t FileContent::BlocksNeededForTruncate(uint64_t new_size) const {
  if (new_size >= size_ || new_size % kBlockSize == 0) return 0;
  const uint64_t index = new_size / kBlockSize;
  return blocks_.Find(index) && !blocks_.WritableInPlace(index) ? 1 : 0;
}

void FileContent::Truncate(uint64_t new_size, Reservation& reservation) {
  if (new_size < size_) {
    uint64_t first_dropped = (new_size + kBlockSize - 1) / kBlockSize;
    blocks_.EraseFrom(first_dropped);
    size_t in_block = static_cast<size_t>(new_size % kBlockSize);
    BlockRef* tail = in_block != 0 ? blocks_.FindMutable(new_size / kBlockSize) : nullptr;
    if (tail) {
      if (tail->shared()) {
        BlockRef copy = reservation.Take();
        std::memcpy(copy.data(), tail->data(), in_block);
        *tail = std::move(copy);
      }
      std::memset(tail->data() + in_block, 0, kBlockSize - in_block);
    }
    base_len_ = std::min(base_len_, new_size);
    sums_.Truncated(new_size);
  } else {
    sums_.Changed(size_, new_size - size_);
  }
  size_ = new_size;
  if (base_len_ == 0) base_.reset();
  CatchUpSums();
}

void FileContent::ReplaceWithBase(std::shared_ptr<BackingFile> base) {
  blocks_.Clear();
  base_ = std::move(base);
  base_len_ = size_;
}

std::vector<std::pair<uint64_t, BlockRef>> FileContent::SpillCandidates() const {
  std::vector<std::pair<uint64_t, BlockRef>> out;
  for (const auto& [index, block] : blocks_) {
    if ((index + 1) * kBlockSize <= size_) out.emplace_back(index, block);
  }
  return out;
}

size_t FileContent::AdoptSpill(std::shared_ptr<BackingFile> spill,
                               const std::vector<std::pair<uint64_t, BlockRef>>& spilled) {
  size_t dropped = 0;
  for (const auto& [index, block] : spilled) {
    const BlockRef* held = blocks_.Find(index);
    if (held && held->data() == block.data()) {
      blocks_.Erase(index);
      ++dropped;
    }
  }
  base_ = std::move(spill);
  base_len_ = size_;
  return dropped;
}

Status WriteContentTo(Env& env, int fd, const FileContent& content) {
  std::vector<char> buf(1 << 20);
  for (uint64_t off = 0; off < content.size(); off += buf.size()) {
    Result<size_t> n = content.ReadInto(off, buf.size(), buf.data());
    if (!n.ok()) return n.status();
    if (Status st = env.WriteAt(fd, buf.data(), *n, off); !st.ok()) return st;
  }
  return Status::Ok();
}

}  // namespace ckptfs
