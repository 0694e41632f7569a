// An earlier mount whose daemon died (its supervisor; a worker's crash is taken over in place)
// leaves what it had not made durable in the shared memory file of its cache
// (fs/cache_memory_file.h). The next mount of the same backing store recovers it before it
// serves: the versions it had sealed are published in their order and made durable; the files it
// had open for writing, which nobody closed, are saved to a rescue directory, never published.
#pragma once

#include <memory>

#include "core/base/config.h"
#include "core/base/status.h"
#include "iouring/env.h"

namespace ckptfs {

// Recovers, with the settings of the mount `config`, what the cache memory `memory_fd` holds
// (its size tells the earlier cache's, ArenaCapacityOf), and makes it durable; says what it did.
// An error: what could be recovered is durable all the same, and what the memory still holds
// (open files that could not be rescued, versions not made durable) is there for a later try.
Status RecoverEarlierMount(const Config& config, int memory_fd, std::unique_ptr<Env> env);

}  // namespace ckptfs
