#include "core/integrity/read_back.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <future>
#include <memory>
#include <string>
#include <system_error>

#include "core/memory/crc32c.h"

namespace ckptfs {
namespace {

// O_DIRECT reads need buffers, offsets and lengths aligned to the device's logical block.
constexpr size_t kDirectAlign = 4096;

// One read of a file: `length` of its bytes from `offset`, summed into its `index`-th span sum.
struct Span {
  size_t file = 0;
  size_t index = 0;
  uint64_t offset = 0;
  size_t length = 0;
};

struct Reader {
  int fd = -1;
  uint64_t size = 0;
  size_t span = kReadBackSpan;  // Divides the record's chunk.
  std::vector<uint32_t> span_sums;
};

struct FreeAligned {
  void operator()(char* p) const { std::free(p); }
};

void Fail(ReadBackOutcome& outcome, const Status& why) {
  if (outcome.verification.verdict == Verification::Verdict::kError) return;
  outcome.verification.verdict = Verification::Verdict::kError;
  outcome.verification.reason = why.ToString();
}

// Opens a reader of `file` of its own, past the page cache where the filesystem allows.
Status OpenReader(Env& env, const ReadBackFile& file, Reader& reader, ReadBackOutcome& outcome) {
  const std::string path = "/proc/self/fd/" + std::to_string(file.fd);
  Result<int> fd = env.Open(AT_FDCWD, path, O_RDONLY | O_DIRECT);
  if (!fd.ok() && fd.status().err() == EINVAL) {
    outcome.from_page_cache = true;
    fd = env.Open(AT_FDCWD, path, O_RDONLY);
  }
  if (!fd.ok()) return Status::Error(fd.status().err(), "read back: open");
  reader.fd = *fd;
  struct stat st {};
  if (Status s = env.Stat(reader.fd, "", &st); !s.ok()) return s;
  reader.size = static_cast<uint64_t>(st.st_size);
  reader.span = static_cast<size_t>(std::min<uint64_t>(kReadBackSpan, file.record->chunk));
  reader.span_sums.resize((reader.size + reader.span - 1) / reader.span);
  return Status::Ok();
}

// The sums of the record's chunks, joined from the span sums.
std::vector<uint32_t> ChunkSums(const Reader& reader, uint64_t chunk) {
  std::vector<uint32_t> sums;
  const size_t spans_per_chunk = static_cast<size_t>(chunk / reader.span);
  for (size_t first = 0; first < reader.span_sums.size(); first += spans_per_chunk) {
    uint32_t sum = reader.span_sums[first];
    const size_t end = std::min(reader.span_sums.size(), first + spans_per_chunk);
    for (size_t i = first + 1; i < end; ++i) {
      const uint64_t length = std::min<uint64_t>(reader.span, reader.size - i * reader.span);
      sum = Crc32cConcat(sum, reader.span_sums[i], length);
    }
    sums.push_back(sum);
  }
  return sums;
}

}  // namespace

std::vector<ReadBackOutcome> ReadBackFiles(Env& env, std::span<const ReadBackFile> files) {
  std::vector<ReadBackOutcome> outcomes(files.size());
  std::vector<Reader> readers(files.size());
  std::vector<Span> spans;
  for (size_t f = 0; f < files.size(); ++f) {
    if (Status s = OpenReader(env, files[f], readers[f], outcomes[f]); !s.ok()) {
      Fail(outcomes[f], s);
      continue;
    }
    const Reader& r = readers[f];
    for (size_t i = 0; i < r.span_sums.size(); ++i) {
      const uint64_t offset = i * r.span;
      spans.push_back(Span{f, i, offset,
                           static_cast<size_t>(std::min<uint64_t>(r.span, r.size - offset))});
    }
  }

  // Two sets of buffers: one read into while the other's spans are summed.
  const size_t window = kReadBackSpansInFlight;
  const size_t slots = std::min(spans.size(), 2 * window);
  std::unique_ptr<char, FreeAligned> buffers(
      slots == 0 ? nullptr
                 : static_cast<char*>(std::aligned_alloc(kDirectAlign, slots * kReadBackSpan)));
  if (slots > 0 && !buffers) {
    for (ReadBackOutcome& o : outcomes) Fail(o, Status::Error(ENOMEM, "read back: buffers"));
    spans.clear();
  }
  std::future<void> summing;
  for (size_t begin = 0, set = 0; begin < spans.size(); begin += window, set ^= 1) {
    const size_t end = std::min(spans.size(), begin + window);
    char* const base = buffers.get() + set * window * kReadBackSpan;
    std::vector<ReadBatchRequest> requests;
    for (size_t k = begin; k < end; ++k) {
      const Span& sp = spans[k];
      const Reader& r = readers[sp.file];
      const size_t length = outcomes[sp.file].from_page_cache
                                ? sp.length
                                : (sp.length + kDirectAlign - 1) / kDirectAlign * kDirectAlign;
      char* const dst = base + (k - begin) * kReadBackSpan;
      requests.push_back(ReadBatchRequest{r.fd, sp.offset, dst, length});
    }
    std::vector<Status> read = env.ReadBatch(requests);
    if (summing.valid()) summing.get();
    for (size_t k = begin; k < end; ++k) {
      if (!read[k - begin].ok()) Fail(outcomes[spans[k].file], read[k - begin]);
    }
    auto sum_window = [&spans, &readers, begin, end, base] {
      for (size_t k = begin; k < end; ++k) {
        const Span& sp = spans[k];
        Crc32c crc;
        crc.Update(base + (k - begin) * kReadBackSpan, sp.length);
        readers[sp.file].span_sums[sp.index] = crc.value();
      }
    };
    try {
      summing = std::async(std::launch::async, sum_window);
    } catch (const std::system_error&) {  // No thread to be had: summed here, not overlapped.
      sum_window();
    }
  }
  if (summing.valid()) summing.get();

  for (size_t f = 0; f < files.size(); ++f) {
    Reader& r = readers[f];
    if (r.fd >= 0) env.Close(r.fd);
    if (outcomes[f].verification.verdict == Verification::Verdict::kError) continue;
    outcomes[f].verification = CompareWithRecord(*files[f].record, r.size,
                                                 ChunkSums(r, files[f].record->chunk));
  }
  return outcomes;
}

}  // namespace ckptfs
