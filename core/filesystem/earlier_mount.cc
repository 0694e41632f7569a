#include "core/filesystem/earlier_mount.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <chrono>

#include "core/filesystem/filesystem.h"
#include "core/memory/arena.h"
#include "core/recovery/cache_memory_layout.h"

namespace ckptfs {

Status RecoverEarlierMount(const Config& config, int memory_fd, std::unique_ptr<Env> env) {
  struct stat st {};
  if (fstat(memory_fd, &st) != 0) return Status::FromErrno("the earlier mount's cache memory");
  Result<uint64_t> capacity = ArenaCapacityOf(static_cast<uint64_t>(st.st_size));
  if (!capacity.ok()) return capacity.status();
  Config earlier = config;
  earlier.cache_size = *capacity;
  earlier.arena_fd = memory_fd;
  earlier.recovers_earlier_mount = true;
  earlier.worker = 0;
  earlier.prefault = false;
  earlier.flush_delay = std::chrono::milliseconds(0);
  Result<std::unique_ptr<Filesystem>> fs = Filesystem::Make(earlier, std::move(env));
  if (!fs.ok()) return fs.status();
  // What could be recovered is made durable even when some could not.
  Status recovered = (*fs)->RecoverEarlierMount();
  (*fs)->Start();
  Status durable = (*fs)->Shutdown();
  return recovered.ok() ? durable : recovered;
}

}  // namespace ckptfs
