// Connection: one TCP connection of the replication protocol, framed (wire.h). Owned by one
// thread; any thread may Shutdown it to wake that thread from a blocking read or write.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/base/status.h"
#include "core/replication/wire.h"

namespace ckptfs::replication {

class Connection {
 public:
  explicit Connection(int fd) : fd_(fd) {}
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  // Connects to `address`:`port` (numeric IPv4 or IPv6), giving up after `timeout`.
  static Result<std::unique_ptr<Connection>> Dial(const std::string& address, uint16_t port,
                                                  std::chrono::milliseconds timeout);

  // Sends all of `bytes`: the peer's error (EPIPE, ECONNRESET, ...) otherwise.
  Status Send(std::string_view bytes);
  // Sends one data frame of `length` (<= kMaxDataChunk) bytes.
  Status SendData(const char* data, size_t length);
  // Reads the next frame's header; ECONNRESET at the peer's end of stream, EPROTO when invalid,
  // EAGAIN when the read timeout passed.
  Result<FrameHeader> ReadHeader();
  // Reads exactly `length` bytes.
  Status ReadExact(char* out, size_t length);
  // Reads the body of a frame whose header was read.
  Result<std::string> ReadBody(const FrameHeader& header);
  // Reads the next frame, which must be of type `expected` (EPROTO otherwise), and returns its body.
  Result<std::string> Expect(Type expected);
  // Reads and writes give up after `timeout` (zero: never).
  void SetTimeout(std::chrono::milliseconds timeout);
  // Ends both directions: the owner's blocking calls return an error. Any thread.
  void Shutdown();
  // The peer's address and port, for messages.
  std::string Peer() const;

 private:
  const int fd_;
};

}  // namespace ckptfs::replication
