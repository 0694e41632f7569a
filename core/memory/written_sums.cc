#include "core/memory/written_sums.h"

#include <algorithm>

namespace ckptfs {

void WrittenSums::Written(uint64_t offset, const char* data, size_t length) {
  if (length == 0) return;
  if (offset < summed_) RollBack(offset);
  if (offset == summed_) {
    Sum(data, length);
    while (!pending_.empty() && pending_.front().second <= summed_) pending_.erase(pending_.begin());
  } else {
    AddPending(offset, offset + length);
  }
}

void WrittenSums::Changed(uint64_t offset, uint64_t length) {
  if (length == 0) return;
  if (offset < summed_) RollBack(offset);
  AddPending(offset, offset + length);
}

void WrittenSums::Truncated(uint64_t size) {
  if (size < summed_) RollBack(size);
  std::erase_if(pending_, [&](const auto& range) { return range.first >= size; });
  if (!pending_.empty()) pending_.back().second = std::min(pending_.back().second, size);
}

std::optional<std::pair<uint64_t, uint64_t>> WrittenSums::NextToCatchUp() const {
  if (pending_.empty() || pending_.front().first > summed_) return std::nullopt;
  return std::make_pair(summed_, pending_.front().second);
}

void WrittenSums::RollBack(uint64_t offset) {
  const uint64_t last_piece_start = piece_sums_.size() * kPiece;
  if (offset >= last_piece_start) {
    const size_t step = static_cast<size_t>((offset - last_piece_start) / kStep);
    const uint64_t was_summed = summed_;
    partial_ = step == 0 ? Crc32c() : steps_[step - 1];
    steps_.resize(step);
    summed_ = last_piece_start + step * kStep;
    AddPending(summed_, was_summed);
    return;
  }
  piece_sums_.resize(offset / kPiece);
  summed_ = piece_sums_.size() * kPiece;
  partial_ = Crc32c();
  steps_.clear();
}

void WrittenSums::AddPending(uint64_t begin, uint64_t end) {
  if (begin >= end) return;
  auto it = std::lower_bound(pending_.begin(), pending_.end(), std::make_pair(begin, end));
  it = pending_.insert(it, {begin, end});
  // Merge with the neighbours it touches or overlaps.
  if (it != pending_.begin() && std::prev(it)->second >= it->first) {
    std::prev(it)->second = std::max(std::prev(it)->second, it->second);
    it = std::prev(pending_.erase(it));
  }
  while (std::next(it) != pending_.end() && std::next(it)->first <= it->second) {
    it->second = std::max(it->second, std::next(it)->second);
    pending_.erase(std::next(it));
  }
  if (pending_.size() > kMaxPending) pending_.pop_back();
}

void WrittenSums::Sum(const char* data, size_t length) {
  while (length > 0) {
    const size_t room = static_cast<size_t>(std::min<uint64_t>(length, kStep - summed_ % kStep));
    if (data) {
      partial_.Update(data, room);
      data += room;
    } else {
      partial_.UpdateZeros(room);
    }
    summed_ += room;
    length -= room;
    if (summed_ % kPiece == 0) {
      piece_sums_.push_back(partial_.value());
      partial_ = Crc32c();
      steps_.clear();
    } else if (summed_ % kStep == 0) {
      steps_.push_back(partial_);
    }
  }
}

}  // namespace ckptfs
