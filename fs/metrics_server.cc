#include "fs/metrics_server.h"

#include <fcntl.h>
#include <httplib.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/stats/metrics_text.h"
#include "fs/client.h"

namespace ckptfs {
namespace {

constexpr size_t kMaxRequestBody = 4096;

void Answer(httplib::Response& res, int status, const std::string& body) {
  res.status = status;
  res.set_content(body, "text/plain; charset=utf-8");
}

}  // namespace

MetricsServer::MetricsServer(const MountOptions& o, const std::string& mountpoint)
    : mountpoint_(mountpoint),
      stats_path_(mountpoint + "/.ckptfs/stats"),
      file_(o.metrics_file),
      interval_(o.metrics_interval) {}

Result<std::unique_ptr<MetricsServer>> MetricsServer::Bind(const MountOptions& o,
                                                          const std::string& mountpoint) {
  if (o.metrics_port == 0 && o.metrics_file.empty()) return std::unique_ptr<MetricsServer>();
  std::unique_ptr<MetricsServer> server(new MetricsServer(o, mountpoint));
  if (!server->file_.empty()) {
    Status written = server->WriteFile(MetricsDownText(mountpoint));
    if (!written.ok()) return written;
  }
  if (o.metrics_port == 0) return server;
  auto http = std::make_unique<httplib::Server>();
  http->set_read_timeout(kRequestTimeout);
  http->set_keep_alive_timeout(kRequestTimeout.count());
  http->set_write_timeout(kReplyTimeout);
  http->set_keep_alive_max_count(16);
  http->set_payload_max_length(kMaxRequestBody);
  // The listening socket stays out of the workers the supervisor starts.
  http->set_socket_options([](int sock) {
    httplib::default_socket_options(sock);
    fcntl(sock, F_SETFD, FD_CLOEXEC);
  });
  MetricsServer* self = server.get();
  http->Get("/metrics", [self](const httplib::Request&, httplib::Response& res) {
    res.set_content(self->Text(), kMetricsContentType);
  });
  auto not_allowed = [](const httplib::Request&, httplib::Response& res) {
    res.set_header("Allow", "GET, HEAD");
    Answer(res, 405, "only GET and HEAD are served\n");
  };
  http->Post(".*", not_allowed);
  http->Put(".*", not_allowed);
  http->Patch(".*", not_allowed);
  http->Delete(".*", not_allowed);
  http->Options(".*", not_allowed);
  http->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    Answer(res, res.status, res.status == 404 ? "not found: the metrics are at /metrics\n"
                                              : "bad request\n");
  });
  if (!http->bind_to_port(o.metrics_host, o.metrics_port)) {
    return Status::Error(EADDRNOTAVAIL, "cannot serve metrics on " + o.metrics_host + ":" +
                                            std::to_string(o.metrics_port) +
                                            " (port in use, or not an address of this host)");
  }
  server->http_ = std::move(http);
  return server;
}

MetricsServer::~MetricsServer() {
  {
    MutexLock lock(mu_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  if (http_) http_->stop();
  if (http_thread_.joinable()) http_thread_.join();
  if (file_thread_.joinable()) file_thread_.join();
  if (!file_.empty()) unlink(file_.c_str());
}

void MetricsServer::Start() {
  if (http_) {
    http_thread_ = std::thread([this] {
      if (!http_->listen_after_bind()) spdlog::error("the metrics endpoint stopped serving");
    });
    // stop() ends only a server that listens: wait for it to, so that the destructor stops it.
    for (int i = 0; i < 1000 && !http_->is_running(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (!file_.empty()) file_thread_ = std::thread([this] { WriteLoop(); });
}

std::string MetricsServer::Text() const {
  std::string text;
  if (!ReadControlFile(stats_path_, &text)) return MetricsDownText(mountpoint_);
  nlohmann::json stats = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (stats.is_discarded()) return MetricsDownText(mountpoint_);
  return MetricsText(stats, mountpoint_);
}

Status MetricsServer::WriteFile(const std::string& text) const {
  const std::string tmp = file_ + ".tmp";
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Status::FromErrno("cannot write the metrics file " + tmp);
  bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int err = errno;
  if (close(fd) != 0 && written) return Status::FromErrno("cannot write " + tmp);
  if (!written) {
    unlink(tmp.c_str());
    return Status::Error(err ? err : EIO, "cannot write " + tmp);
  }
  if (rename(tmp.c_str(), file_.c_str()) != 0) {
    Status st = Status::FromErrno("cannot replace the metrics file " + file_);
    unlink(tmp.c_str());
    return st;
  }
  return Status::Ok();
}

void MetricsServer::WriteLoop() {
  MutexLock lock(mu_);
  while (!stopping_) {
    lock.Unlock();
    Status written = WriteFile(Text());
    if (!written.ok() && !file_failing_) spdlog::warn("{}", written.ToString());
    if (written.ok() && file_failing_) spdlog::info("the metrics file {} is written again", file_);
    file_failing_ = !written.ok();
    lock.Lock();
    stop_cv_.wait_for(lock, interval_, [this]() REQUIRES(mu_) { return stopping_; });
  }
}

}  // namespace ckptfs
