// A real S3 server for unit tests: moto's server mode (CKPTFS_MOTO_SERVER, the venv's
// moto_server) on 127.0.0.1 on a free port, from construction until destruction (stopped by its
// PID). Buckets are made with moto's unsigned PUT.
#pragma once

#include <arpa/inet.h>
#include <curl/curl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

namespace ckptfs::testing_util {

// A TCP port of 127.0.0.1 nothing listened on a moment ago.
inline int FreeLoopbackPort() {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(s, reinterpret_cast<sockaddr*>(&a), &len);
  close(s);
  return ntohs(a.sin_port);
}

inline bool ListensOnLoopback(int port) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  close(s);
  return ok;
}

class MotoServer {
 public:
  // Starts the server and waits (up to 30 s) until it listens; ready() tells whether it does.
  MotoServer() : port_(FreeLoopbackPort()) {
    pid_ = fork();
    if (pid_ == 0) {
      const std::string port = std::to_string(port_);
      (void)!freopen("/dev/null", "w", stdout);
      (void)!freopen("/dev/null", "w", stderr);
      execl(CKPTFS_MOTO_SERVER, CKPTFS_MOTO_SERVER, "-H", "127.0.0.1", "-p", port.c_str(),
            nullptr);
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (!ListensOnLoopback(port_) && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~MotoServer() {
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      waitpid(pid_, nullptr, 0);
    }
  }
  MotoServer(const MotoServer&) = delete;
  MotoServer& operator=(const MotoServer&) = delete;

  bool ready() const { return pid_ > 0 && ListensOnLoopback(port_); }
  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }

  // Makes bucket `name`; false when the server did not answer.
  bool CreateBucket(const std::string& name) const {
    CURL* curl = curl_easy_init();
    const std::string url = endpoint() + "/" + name;
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, "PUT");
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION,
                     +[](char*, size_t s, size_t n, void*) { return s * n; });
    const bool ok = curl_easy_perform(curl) == CURLE_OK;
    curl_easy_cleanup(curl);
    return ok;
  }

 private:
  const int port_;
  pid_t pid_ = -1;
};

}  // namespace ckptfs::testing_util
