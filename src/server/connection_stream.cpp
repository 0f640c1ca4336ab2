#include "server/connection_stream.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace specstack {
namespace {

using Clock = std::chrono::steady_clock;

// Waits until `sock` has `events` or `timeout` passes: > 0 ready, 0 timed out, < 0 error.
int wait_for(socket_t sock, short events, std::chrono::microseconds timeout) {
  const Clock::time_point deadline = Clock::now() + timeout;
  while (true) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd fd{sock, events, 0};
    const int n = ::poll(&fd, 1, static_cast<int>(std::max<int64_t>(0, left)));
    if (n < 0 && errno == EINTR) continue;
    if (n > 0 && (fd.revents & POLLNVAL)) return -1;
    return n;
  }
}

void ip_and_port(const sockaddr_storage& addr, socklen_t len, std::string& ip, int& port) {
  char host[NI_MAXHOST];
  char serv[NI_MAXSERV];
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), serv,
                  sizeof(serv), NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
    ip = host;
    port = std::atoi(serv);
  }
}

}  // namespace

ConnectionStream::ConnectionStream(socket_t sock, size_t head_bytes,
                                   ConnectionStreamOptions options)
    : sock_(sock), head_left_(head_bytes), options_(options) {}

bool ConnectionStream::is_readable() const {
  return head_pos_ < head_.size() || wait_for(sock_, POLLIN, options_.read_timeout) > 0;
}

bool ConnectionStream::is_writable() const {
  if (wait_for(sock_, POLLOUT, options_.write_timeout) <= 0) return false;
  // Alive unless the peer has closed: nothing to read, or something that is
  // not the end of the stream.
  pollfd fd{sock_, POLLIN, 0};
  if (::poll(&fd, 1, 0) == 0) return true;
  char byte;
  return ::recv(sock_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
}

ssize_t ConnectionStream::read(char* ptr, size_t size) {
  if (head_pos_ == head_.size() && head_left_ > 0) {
    if (!is_readable()) return -1;
    head_.resize(head_left_);
    ssize_t n;
    do {
      n = ::recv(sock_, head_.data(), head_left_, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
      head_.clear();
      return n;
    }
    head_.resize(static_cast<size_t>(n));
    head_pos_ = 0;
    head_left_ -= static_cast<size_t>(n);
  }
  if (head_pos_ < head_.size()) {
    const size_t n = std::min(size, head_.size() - head_pos_);
    std::memcpy(ptr, head_.data() + head_pos_, n);
    head_pos_ += n;
    return static_cast<ssize_t>(n);
  }
  while (true) {
    if (!is_readable()) return -1;
    const ssize_t n = ::recv(sock_, ptr, size, MSG_DONTWAIT);
    if (n >= 0 || (errno != EINTR && errno != EAGAIN)) return n;
  }
}

ssize_t ConnectionStream::write(const char* ptr, size_t size) {
  while (true) {
    if (wait_for(sock_, POLLOUT, options_.write_timeout) <= 0) return -1;
    // Partial writes are fine: httplib writes the rest.
    const ssize_t n = ::send(sock_, ptr, size, MSG_DONTWAIT | MSG_NOSIGNAL);
    if (n >= 0 || (errno != EINTR && errno != EAGAIN)) return n;
  }
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    ip_and_port(addr, len, ip, port);
  }
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    ip_and_port(addr, len, ip, port);
  }
}

}  // namespace specstack
