#include "core/integrity/checksum.h"

#include <algorithm>
#include <utility>
#include <vector>

namespace ckptfs {
namespace {

// A file's pieces as WrittenSums keeps them are joined into chunks: a chunk is a whole number of
// pieces.
static_assert(kMinChecksumChunk % WrittenSums::kPiece == 0);

// Backing bytes are summed through a buffer of this size.
constexpr size_t kBufferBytes = size_t{4} << 20;

// The CRC32C of bytes [offset, offset + length) of `content`, read now.
Result<uint32_t> SumOfRange(const FileContent& content, uint64_t offset, uint64_t length,
                            std::vector<char>& buffer) {
  Crc32c crc;
  const uint64_t end = offset + length;
  while (offset < end) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(end - offset, kBufferBytes));
    const uint64_t before = offset;
    for (const ReadSegment& seg : content.Read(offset, want)) {
      switch (seg.kind) {
        case ReadSegment::Kind::kMemory:
          crc.Update(seg.data, seg.length);
          break;
        case ReadSegment::Kind::kZeros:
          crc.UpdateZeros(seg.length);
          break;
        case ReadSegment::Kind::kBacking:
          buffer.resize(seg.length);
          if (Status st = seg.file->Read(buffer.data(), seg.length, seg.file_offset); !st.ok()) {
            return st;
          }
          crc.Update(buffer.data(), seg.length);
          break;
      }
      offset += seg.length;
    }
    if (offset == before) return Status::Error(EIO, "checksum: content shorter than its size");
  }
  return crc.value();
}

}  // namespace

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
    const uint64_t room = std::min<uint64_t>(length, record_.chunk - fed_ % record_.chunk);
    chunk_.UpdateZeros(room);
    fed_ += room;
    length -= room;
    EndFullChunk();
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

Result<ChecksumRecord> ChecksumOf(const FileContent& content, uint64_t* summed_now) {
  const uint64_t size = content.size();
  const WrittenSums& written = content.written_sums();
  constexpr uint64_t kPiece = WrittenSums::kPiece;
  ChecksumRecord record;
  record.chunk = ChecksumChunkFor(size);
  record.size = size;
  std::vector<char> buffer;
  for (uint64_t chunk_start = 0; chunk_start < size; chunk_start += record.chunk) {
    const uint64_t chunk_end = std::min(size, chunk_start + record.chunk);
    uint32_t chunk_sum = 0;
    for (uint64_t piece_start = chunk_start; piece_start < chunk_end; piece_start += kPiece) {
      const uint64_t length = std::min(chunk_end, piece_start + kPiece) - piece_start;
      const uint64_t piece = piece_start / kPiece;
      uint32_t sum;
      if (length == kPiece && piece < written.piece_sums().size()) {
        sum = written.piece_sums()[piece];
      } else if (piece_start + length == written.summed() && written.summed() % kPiece != 0) {
        sum = written.partial_piece_sum();
      } else {
        Result<uint32_t> now = SumOfRange(content, piece_start, length, buffer);
        if (!now.ok()) return now.status();
        sum = *now;
        if (summed_now) *summed_now += length;
      }
      chunk_sum = piece_start == chunk_start ? sum : Crc32cConcat(chunk_sum, sum, length);
    }
    record.sums.push_back(chunk_sum);
  }
  return record;
}

uint32_t WholeFileCrc32c(const ChecksumRecord& record) {
  uint32_t crc = 0;
  for (size_t i = 0; i < record.sums.size(); ++i) {
    const uint64_t begin = i * record.chunk;
    const uint64_t length = std::min(record.chunk, record.size - begin);
    crc = i == 0 ? record.sums[0] : Crc32cConcat(crc, record.sums[i], length);
  }
  return crc;
}

}  // namespace ckptfs
