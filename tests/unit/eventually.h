// Eventually: waits (bounded) until a state holds; never the assertion of a timing.
#pragma once

#include <chrono>
#include <thread>

namespace ckptfs {

// Polls `done` every 5 ms for up to `limit`; returns whether it held.
template <typename F>
bool Eventually(F done, std::chrono::seconds limit = std::chrono::seconds(20)) {
  for (auto until = std::chrono::steady_clock::now() + limit;
       std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(std::chrono::milliseconds(5))) {
    if (done()) return true;
  }
  return done();
}

}  // namespace ckptfs
