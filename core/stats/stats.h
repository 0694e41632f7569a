// Counters shown in .ckptfs/stats. Updated lock-free from any thread.
#pragma once

#include <atomic>
#include <cstdint>

#include "core/stats/histogram.h"

namespace ckptfs {

struct Stats {
  std::atomic<uint64_t> bytes_written{0};     // Accepted from clients.
  std::atomic<uint64_t> bytes_read{0};        // Served to clients.
  std::atomic<uint64_t> bytes_flushed{0};     // Of the file versions made durable (once each).
  std::atomic<uint64_t> files_flushed{0};     // Versions published.
  std::atomic<uint64_t> bytes_checksummed{0};  // Summed (CRC32C) before they were flushed.
  // Of those, the bytes summed at flush (read again) rather than as they were written.
  std::atomic<uint64_t> bytes_summed_at_flush{0};
  // -o verify=markers: bytes read back from the backing store and checked before publication,
  // and the versions that did not match (written again from memory).
  std::atomic<uint64_t> bytes_read_back{0};
  std::atomic<uint64_t> checksum_mismatches{0};
  // -o verify=reads: backing files read whole and checked against their records before their
  // bytes were served, those that did not match (their reads fail with EIO), those without a
  // record (served unchecked), and the bytes read to check them.
  std::atomic<uint64_t> read_files_verified{0};
  std::atomic<uint64_t> read_mismatches{0};
  std::atomic<uint64_t> read_files_unrecorded{0};
  std::atomic<uint64_t> bytes_verified_for_reads{0};
  // Write-only opens served through the page cache because their writer writes from memory it
  // shares copy-on-write with its parent (policy::WritesFromForkedMemory).
  std::atomic<uint64_t> forked_writer_opens{0};
  std::atomic<uint64_t> bytes_landed{0};  // Written in blocks the file took as read (no copy).
  // Small backing files read ahead of a loader going through their directory
  // (core/backing/sibling_read_ahead.h).
  std::atomic<uint64_t> files_read_ahead{0};
  std::atomic<uint64_t> commits_published{0};  // Shared mode: markers published after a commit.
  std::atomic<uint64_t> commits_failed{0};     // Markers whose commit failed: never published.
  std::atomic<uint64_t> versions_skipped{0};  // Superseded before they were flushed.
  std::atomic<uint64_t> flush_batches{0};
  std::atomic<uint64_t> flush_errors{0};
  std::atomic<uint64_t> flush_busy_ns{0};     // Time spent in flush batches.
  std::atomic<uint64_t> evicted_blocks{0};
  std::atomic<uint64_t> spilled_blocks{0};   // Moved out of memory before their file was sealed.
  std::atomic<uint64_t> spill_errors{0};     // Spills that failed (Flusher::spill_error).
  // Unsealed bytes this worker took over from its predecessor: left in the shared memory of the
  // cache, or read from handoff files.
  std::atomic<uint64_t> taken_over_in_memory{0};
  std::atomic<uint64_t> taken_over_from_files{0};
  // Sealed versions a crashed predecessor had not made durable, recovered from the log.
  std::atomic<uint64_t> recovered_versions{0};
  std::atomic<uint64_t> recovered_bytes{0};
  // Open handles a crashed predecessor had given the kernel, taken over; the bytes of the files
  // among them open for writing.
  std::atomic<uint64_t> recovered_handles{0};
  std::atomic<uint64_t> recovered_open_bytes{0};
  // Lookups and opens refused (ENFILE) because the kernel state record had no room for them.
  std::atomic<uint64_t> kernel_record_refused{0};
  // -o remote: bytes and files on the object store (core/remote/uploader.h), requests retried,
  // and upload steps that failed for good and were started again after a back-off.
  std::atomic<uint64_t> remote_bytes_uploaded{0};
  std::atomic<uint64_t> remote_files_uploaded{0};
  std::atomic<uint64_t> remote_retries{0};
  std::atomic<uint64_t> remote_errors{0};
  // Uploads given up because the file's local bytes no longer match their checksum record.
  std::atomic<uint64_t> remote_corrupt_files{0};
  // -o remote, the read path (core/remote/remote_reader.h): directories listed from the store,
  // files and bytes fetched from it, names it listed that were refused, local files replaced by
  // a placeholder of the store's newer object (policy::JudgeListedOverLocal).
  std::atomic<uint64_t> remote_directories_listed{0};
  std::atomic<uint64_t> remote_files_fetched{0};
  std::atomic<uint64_t> remote_bytes_fetched{0};
  std::atomic<uint64_t> remote_names_refused{0};
  std::atomic<uint64_t> remote_local_files_replaced{0};
  // -o local_size (core/remote/local_tier.h): files and bytes evicted from the backing directory.
  std::atomic<uint64_t> remote_files_evicted{0};
  std::atomic<uint64_t> remote_bytes_evicted{0};
  // Per published file: from the flusher taking it to durable (the time of its batch), and from
  // its sealing (close, fsync) to durable.
  Histogram flush_seconds{kFlushBuckets};
  Histogram save_to_durable_seconds{kFlushBuckets};
};

}  // namespace ckptfs
