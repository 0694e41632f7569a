// MetricsServer: a mount's Prometheus metrics (core/stats/metrics_text.h), served over HTTP at
// /metrics (-o metrics) and written to a file for node_exporter's textfile collector
// (-o metrics_file). Run by the supervisor (fs/supervisor.h), so that the endpoint stays while
// workers are replaced; the figures are read from the mount's own `.ckptfs/stats`.
//
// The endpoint answers GET and HEAD of /metrics; other paths get 404, other methods 405, request
// bodies and headers past a few KiB 413 or 400; a client that sends nothing for kRequestTimeout
// (also between the requests of a kept-alive connection), or does not read the reply within
// kReplyTimeout, is dropped. Requests are served by a small pool of threads of their own: a
// scrape never holds up the mount. A scrape while no worker serves (one is being replaced, the
// mount is going) waits for the next; one of a mount that is gone shows ckptfs_up 0.
#pragma once

#include <chrono>
#include <condition_variable>
#include <memory>
#include <string>
#include <thread>

#include "core/base/status.h"
#include "core/base/thread_annotations.h"
#include "fs/options.h"

namespace httplib {
class Server;
}

namespace ckptfs {

inline constexpr std::chrono::seconds kRequestTimeout{1};
inline constexpr std::chrono::seconds kReplyTimeout{5};

class MetricsServer {
 public:
  // Binds the endpoint and writes the metrics file once (ckptfs_up 0), so that a port in use or
  // a directory that cannot be written fails the mount before it serves. Null when the options
  // ask for neither. Starts no thread: the process may fork (daemonize) before Start.
  static Result<std::unique_ptr<MetricsServer>> Bind(const MountOptions& o,
                                                     const std::string& mountpoint);
  ~MetricsServer();  // Stops, and removes the metrics file (the mount is gone).

  // Serves the endpoint and writes the file every interval, until destroyed.
  void Start();

  // The metrics of the mount now.
  std::string Text() const;

 private:
  MetricsServer(const MountOptions& o, const std::string& mountpoint);
  // Replaces the metrics file with `text` (written beside it, then renamed).
  Status WriteFile(const std::string& text) const;
  void WriteLoop();

  const std::string mountpoint_;
  const std::string stats_path_;
  const std::string file_;
  const std::chrono::milliseconds interval_;
  std::unique_ptr<httplib::Server> http_;
  std::thread http_thread_, file_thread_;
  Mutex mu_;
  std::condition_variable_any stop_cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  bool file_failing_ = false;  // Of the writer thread: the latest write failed (said once).
};

}  // namespace ckptfs
