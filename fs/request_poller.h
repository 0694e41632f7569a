// Polling /dev/fuse for the next request before sleeping in read(2), so that a request which
// comes soon (the next of a burst of small ones) is read by a running thread instead of waking a
// sleeping one on an idle CPU. The window adapts (policy::NextRequestPollWindow,
// core/base/serve_policy.h). While it is open, one serving thread polls and reads at a time and
// the others wait for their turn, not in read(2), where the kernel would wake one of them for
// each request; while it is shut, every thread reads at once. Polling takes only a CPU nobody else
// wants: none while the flusher applies a batch, and none for a while after a poller's yield gave
// its CPU to another thread (policy::RequestPollContended).
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <nlohmann/json.hpp>

namespace ckptfs {

// The longest window, the `request_poll` option (0: never poll); polling starts over. Set
// before the loop runs.
void SetRequestPollMax(std::chrono::microseconds max);

// While `*busy` is true (the flusher applies a batch, wanting a CPU of its own), threads read
// without polling; nullptr: never. Set before the loop runs; read for each request, from any
// thread, so `*busy` outlives the loop.
void SetRequestPollPause(const std::atomic<bool>* busy);

// Reads one request with `read` (as read(2) would read `fd`), after waiting for the turn and
// polling `fd` for the current window when it is open.
ssize_t ReadAfterPolling(int fd, void* buf, size_t len, ssize_t (*read)(int, void*, size_t));

// Adds the poller's figures to the worker's stats (core/stats/stats_schema.json: request_poll_us,
// request_poll_window_us, request_polls, requests_caught_polling, request_polls_contended,
// request_polling_seconds).
void AddRequestPollStats(nlohmann::json* worker);

}  // namespace ckptfs
