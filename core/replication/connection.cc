#include "core/replication/connection.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cstring>
#include <memory>

namespace ckptfs::replication {

Connection::~Connection() { close(fd_); }

Result<std::unique_ptr<Connection>> Connection::Dial(const std::string& address, uint16_t port,
                                                     std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_flags = AI_NUMERICHOST | AI_NUMERICSERV;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(address.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return Status::Error(EINVAL, "not a numeric address: " + address + " (" + gai_strerror(rc) + ")");
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, freeaddrinfo);
  int fd = socket(found->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return Status::FromErrno("socket");
  auto conn = std::make_unique<Connection>(fd);
  const std::string where = address + ":" + service;
  if (connect(fd, found->ai_addr, found->ai_addrlen) != 0) {
    if (errno != EINPROGRESS) return Status::FromErrno("connect to " + where);
    pollfd p{fd, POLLOUT, 0};
    int ready = poll(&p, 1, static_cast<int>(timeout.count()));
    if (ready == 0) return Status::Error(ETIMEDOUT, "connect to " + where);
    if (ready < 0) return Status::FromErrno("connect to " + where);
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
    if (err != 0) return Status::Error(err, "connect to " + where + ": " + strerror(err));
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof one);
  return conn;
}

Status Connection::Send(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("send to " + Peer());
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Status Connection::SendData(const char* data, size_t length) {
  std::string header = EncodeHeader(Type::kData, static_cast<uint32_t>(length));
  iovec iov[2] = {{header.data(), header.size()}, {const_cast<char*>(data), length}};
  size_t left = header.size() + length;
  int first = 0;
  while (left > 0) {
    msghdr msg{};
    msg.msg_iov = iov + first;
    msg.msg_iovlen = 2 - first;
    ssize_t n = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::FromErrno("send to " + Peer());
    }
    left -= static_cast<size_t>(n);
    size_t done = static_cast<size_t>(n);
    while (first < 2 && done >= iov[first].iov_len) done -= iov[first++].iov_len;
    if (first < 2) {
      iov[first].iov_base = static_cast<char*>(iov[first].iov_base) + done;
      iov[first].iov_len -= done;
    }
  }
  return Status::Ok();
}

Status Connection::ReadExact(char* out, size_t length) {
  while (length > 0) {
    ssize_t n = recv(fd_, out, length, 0);
    if (n == 0) return Status::Error(ECONNRESET, Peer() + " closed the connection");
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EWOULDBLOCK) return Status::Error(EAGAIN, Peer() + " sent nothing in time");
      return Status::FromErrno("receive from " + Peer());
    }
    out += n;
    length -= static_cast<size_t>(n);
  }
  return Status::Ok();
}

Result<FrameHeader> Connection::ReadHeader() {
  uint8_t bytes[kHeaderBytes];
  if (Status st = ReadExact(reinterpret_cast<char*>(bytes), sizeof bytes); !st.ok()) return st;
  return DecodeHeader(bytes);
}

Result<std::string> Connection::ReadBody(const FrameHeader& header) {
  std::string body(header.length, '\0');
  if (Status st = ReadExact(body.data(), body.size()); !st.ok()) return st;
  return body;
}

Result<std::string> Connection::Expect(Type expected) {
  Result<FrameHeader> header = ReadHeader();
  if (!header.ok()) return header.status();
  if (header->type != expected) {
    return Status::Error(EPROTO, std::string("expected a ") + TypeName(expected) + " frame, got " +
                                     TypeName(header->type));
  }
  return ReadBody(*header);
}

void Connection::SetTimeout(std::chrono::milliseconds timeout) {
  timeval tv{};
  tv.tv_sec = timeout.count() / 1000;
  tv.tv_usec = (timeout.count() % 1000) * 1000;
  setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
}

void Connection::Shutdown() { shutdown(fd_, SHUT_RDWR); }

std::string Connection::Peer() const {
  sockaddr_storage addr{};
  socklen_t len = sizeof addr;
  if (getpeername(fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0) return "a peer";
  char host[NI_MAXHOST] = {}, port[NI_MAXSERV] = {};
  if (getnameinfo(reinterpret_cast<sockaddr*>(&addr), len, host, sizeof host, port, sizeof port,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
    return "a peer";
  }
  return std::string(host) + ":" + port;
}

}  // namespace ckptfs::replication
