// The httplib::Stream one request is read from and answered on, once the idle
// stage (idle_stage.h) has seen its whole head arrive. Debian's httplib keeps
// its own SocketStream out of the header, so this is the equivalent: reads
// and writes wait at most the read / write timeout, and is_writable() is false
// once the peer has closed (httplib's is_socket_alive), which is how a
// streamed response notices a vanished client.
//
// Unlike httplib's stream it never reads past the request: the head's bytes
// (known from the idle stage's peek) are read in one recv, and everything
// after them only as httplib asks for it, so bytes of a pipelined next request
// stay in the socket for the idle stage to find.
#pragma once

#include <httplib.h>

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

namespace specstack {

struct ConnectionStreamOptions {
  std::chrono::microseconds read_timeout{5'000'000};
  std::chrono::microseconds write_timeout{5'000'000};
};

class ConnectionStream final : public httplib::Stream {
 public:
  // `head_bytes`: the request head's length as peeked (0: unknown, e.g. a
  // head too large to peek; then it is read as httplib asks).
  ConnectionStream(socket_t sock, size_t head_bytes, ConnectionStreamOptions options);

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t size) override;
  ssize_t write(const char* ptr, size_t size) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return sock_; }

 private:
  socket_t sock_;
  size_t head_left_;  // head bytes not yet taken from the socket
  ConnectionStreamOptions options_;
  std::vector<char> head_;  // the head, read at once (httplib reads it a byte at a time)
  size_t head_pos_ = 0;
};

}  // namespace specstack
