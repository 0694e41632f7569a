#include "core/filesystem/stats_report.h"

namespace ckptfs {

std::string StatsReport::Json() const {
  nlohmann::json j;
  uint64_t pending_bytes, pending_entries;
  std::string last_error;
  nlohmann::json zarr_arrays;
  {
    NamespaceLock lock(ns.mutex());
    zarr_arrays = zarr.StatsLocked();
    pending_bytes = journal.pending_bytes();
    pending_entries = journal.pending_entries();
    Status flush_error = flusher.last_error();
    last_error = flush_error.ok() ? "" : flush_error.ToString();
  }
  double busy_s = static_cast<double>(stats.flush_busy_ns.load()) / 1e9;
  j["backend"] = flusher.backend_name();
  j["cache_size"] = config.cache_size;
  j["memory_used"] = arena.used_blocks() * kBlockSize;
  j["memory_mapped"] = arena.mapped_blocks() * kBlockSize;
  j["memory_prefaulted"] = arena.prefaulted_bytes();
  j["prefault_running"] = config.prefault && !arena.prefault_done();
  j["writers_waiting"] = arena.waiting_writers();
  j["dirty_bytes"] = pending_bytes;
  j["pending_entries"] = pending_entries;
  j["bytes_written"] = stats.bytes_written.load();
  j["bytes_read"] = stats.bytes_read.load();
  j["bytes_flushed"] = stats.bytes_flushed.load();
  j["files_flushed"] = stats.files_flushed.load();
  j["versions_skipped"] = stats.versions_skipped.load();
  j["flush_batches"] = stats.flush_batches.load();
  j["flush_errors"] = stats.flush_errors.load();
  j["flush_throughput"] = busy_s > 0 ? static_cast<double>(stats.bytes_flushed.load()) / busy_s : 0.0;
  j["evicted_bytes"] = stats.evicted_blocks.load() * kBlockSize;
  j["spilled_bytes"] = stats.spilled_blocks.load() * kBlockSize;
  j["spill_errors"] = stats.spill_errors.load();
  const Status spill_error = flusher.spill_error();
  j["spill_error"] = spill_error.ok() ? "" : spill_error.ToString();
  j["cache_shared"] = arena.shared();
  j["taken_over_in_memory"] = stats.taken_over_in_memory.load();
  j["taken_over_from_files"] = stats.taken_over_from_files.load();
  j["recovered_versions"] = stats.recovered_versions.load();
  j["recovered_bytes"] = stats.recovered_bytes.load();
  j["recovered_handles"] = stats.recovered_handles.load();
  j["recovered_open_bytes"] = stats.recovered_open_bytes.load();
  j["kernel_record_refused"] = stats.kernel_record_refused.load();
  j["last_error"] = last_error;
  j["zarr_fine_grid"] = zarr_arrays;
  j["tensor_views"] = tensors.size();
  j["flush_seconds"] = stats.flush_seconds.ToJson();
  j["save_to_durable_seconds"] = stats.save_to_durable_seconds.ToJson();
  if (request_stats) j["fuse_request_seconds"] = request_stats();
  if (shared) {
    nlohmann::json group = shared->StatusJson();
    group["held_markers"] = flusher.held_markers();
    group["commits_published"] = stats.commits_published.load();
    group["commits_failed"] = stats.commits_failed.load();
    Status failure = flusher.last_commit_failure();
    group["last_commit_error"] = failure.ok() ? "" : failure.ToString();
    j["shared"] = std::move(group);
  }
  if (worker_info) {
    j["worker"] =
        nlohmann::json::parse(worker_info(), nullptr, /*allow_exceptions=*/false);
  }
  return j.dump(2) + "\n";
}

}  // namespace ckptfs
