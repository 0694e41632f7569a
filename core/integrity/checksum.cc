#include "core/integrity/checksum.h"

#include <isa-l/crc.h>

#include <algorithm>
#include <utility>
#include <vector>

namespace ckptfs {
namespace {

// ISA-L takes an int length; larger spans go in pieces of this many bytes.
constexpr size_t kMaxPiece = size_t{1} << 30;
// Backing bytes and zeros are summed through a buffer of this size.
constexpr size_t kBufferBytes = size_t{4} << 20;

const std::vector<char>& Zeros() {
  static const std::vector<char> zeros(kBufferBytes, 0);
  return zeros;
}

}  // namespace

void Crc32c::Update(const char* data, size_t length) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(data);
  while (length > 0) {
    const size_t piece = std::min(length, kMaxPiece);
    state_ = crc32_iscsi(const_cast<unsigned char*>(bytes), static_cast<int>(piece), state_);
    bytes += piece;
    length -= piece;
  }
}

void Crc32c::UpdateZeros(uint64_t length) {
  while (length > 0) {
    const size_t piece = static_cast<size_t>(std::min<uint64_t>(length, Zeros().size()));
    Update(Zeros().data(), piece);
    length -= piece;
  }
}

ChunkedChecksum::ChunkedChecksum(uint64_t size, uint64_t chunk) {
  record_.chunk = chunk;
  record_.size = size;
  record_.sums.reserve(size / record_.chunk + 1);
}

void ChunkedChecksum::Update(const char* data, size_t length) {
  while (length > 0) {
    const size_t room = static_cast<size_t>(
        std::min<uint64_t>(length, record_.chunk - fed_ % record_.chunk));
    chunk_.Update(data, room);
    fed_ += room;
    data += room;
    length -= room;
    EndFullChunk();
  }
}

void ChunkedChecksum::UpdateZeros(uint64_t length) {
  while (length > 0) {
    const size_t piece = static_cast<size_t>(std::min<uint64_t>(length, Zeros().size()));
    Update(Zeros().data(), piece);
    length -= piece;
  }
}

void ChunkedChecksum::EndFullChunk() {
  if (fed_ % record_.chunk != 0) return;
  record_.sums.push_back(chunk_.value());
  chunk_ = Crc32c();
}

ChecksumRecord ChunkedChecksum::Finish() && {
  if (fed_ % record_.chunk != 0) record_.sums.push_back(chunk_.value());
  return std::move(record_);
}

Result<ChecksumRecord> ChecksumOf(const FileContent& content) {
  const uint64_t size = content.size();
  ChunkedChecksum sum(size);
  std::vector<char> buffer;
  for (uint64_t offset = 0; offset < size;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(size - offset, kBufferBytes));
    const uint64_t before = offset;
    for (const ReadSegment& seg : content.Read(offset, want)) {
      switch (seg.kind) {
        case ReadSegment::Kind::kMemory:
          sum.Update(seg.data, seg.length);
          break;
        case ReadSegment::Kind::kZeros:
          sum.UpdateZeros(seg.length);
          break;
        case ReadSegment::Kind::kBacking:
          buffer.resize(seg.length);
          if (Status st = seg.file->Read(buffer.data(), seg.length, seg.file_offset); !st.ok()) {
            return st;
          }
          sum.Update(buffer.data(), seg.length);
          break;
      }
      offset += seg.length;
    }
    if (offset == before) return Status::Error(EIO, "checksum: content shorter than its size");
  }
  return std::move(sum).Finish();
}

}  // namespace ckptfs
