#include "server/idle_stage.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>

namespace specstack {

Result<std::unique_ptr<IdleStage>> IdleStage::start(IdleStageOptions options, Ready on_ready,
                                                    Close close) {
  const int epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
  if (epoll_fd < 0) return errorf("epoll_create1 failed: {}", std::strerror(errno));
  const int wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  epoll_event event{};
  event.events = EPOLLIN;
  event.data.fd = wake_fd;
  if (wake_fd < 0 || ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, wake_fd, &event) != 0) {
    const int error = errno;
    if (wake_fd >= 0) ::close(wake_fd);
    ::close(epoll_fd);
    return errorf("cannot set up the idle stage's eventfd: {}", std::strerror(error));
  }
  return std::unique_ptr<IdleStage>(
      new IdleStage(options, std::move(on_ready), std::move(close), epoll_fd, wake_fd));
}

IdleStage::IdleStage(IdleStageOptions options, Ready on_ready, Close close, int epoll_fd,
                     int wake_fd)
    : options_(options),
      on_ready_(std::move(on_ready)),
      close_(std::move(close)),
      epoll_fd_(epoll_fd),
      wake_fd_(wake_fd),
      peek_(std::max<size_t>(options.max_head_bytes, 4)) {
  thread_ = std::thread(&IdleStage::loop, this);
}

IdleStage::~IdleStage() {
  stop();
  ::close(wake_fd_);
  ::close(epoll_fd_);
}

void IdleStage::add(IdleConnection connection) {
  bool queued = false;
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!stopping_) {
      wake = incoming_.empty();  // else a wake-up is already pending
      incoming_.push_back(connection);
      queued = true;
    }
  }
  if (!queued) {
    close_(connection.sock);
  } else if (wake) {
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  }
}

void IdleStage::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  const uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_fd_, &one, sizeof(one));
  if (thread_.joinable()) thread_.join();
}

size_t IdleStage::waiting() const {
  return n_waiting_;
}

void IdleStage::loop() {
  std::vector<epoll_event> events(256);
  std::vector<IdleConnection> incoming;
  while (true) {
    int timeout_ms = -1;
    if (!deadlines_.empty()) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadlines_.begin()->first - Clock::now());
      timeout_ms = static_cast<int>(std::clamp<int64_t>(left.count(), 0, 60'000));
    }
    const int n =
        ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
    const Clock::time_point now = Clock::now();
    bool woken = false;
    for (int i = 0; i < n; ++i) {
      if (events[i].data.fd == wake_fd_) {
        woken = true;
        continue;
      }
      examine(events[i].data.fd, (events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0, now);
    }
    if (woken) {
      uint64_t count;
      [[maybe_unused]] ssize_t r = ::read(wake_fd_, &count, sizeof(count));
      bool stopping;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        incoming.swap(incoming_);
        stopping = stopping_;
      }
      if (stopping) {
        // add() closes what comes after this; what came before is closed here.
        for (const IdleConnection& connection : incoming) close_(connection.sock);
        for (auto& [sock, waiting] : waiting_) {
          ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, sock, nullptr);
          close_(sock);
        }
        waiting_.clear();
        deadlines_.clear();
        n_waiting_ = 0;
        return;
      }
      for (const IdleConnection& connection : incoming) admit(connection, now);
      incoming.clear();
    }
    while (!deadlines_.empty() && deadlines_.begin()->first <= now) {
      const socket_t sock = deadlines_.begin()->second;
      forget(sock);
      close_(sock);
    }
  }
}

void IdleStage::admit(IdleConnection connection, Clock::time_point now) {
  epoll_event event{};
  // Edge-triggered: a peek consumes nothing, so level-triggered would report
  // an incomplete head again and again; only new bytes are news.
  event.events = EPOLLIN | EPOLLRDHUP | EPOLLET;
  event.data.fd = connection.sock;
  if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, connection.sock, &event) != 0) {
    close_(connection.sock);
    return;
  }
  connection.head_bytes = 0;
  Waiting& waiting = waiting_[connection.sock];
  waiting = Waiting{connection, {}, false, 0};
  n_waiting_ = waiting_.size();
  set_deadline(waiting, now + options_.keep_alive_timeout);
  // The next request may be here already (pipelined, or a quick client).
  examine(connection.sock, false, now);
}

void IdleStage::examine(socket_t sock, bool peer_hung_up, Clock::time_point now) {
  auto it = waiting_.find(sock);
  if (it == waiting_.end()) return;
  Waiting& waiting = it->second;
  ssize_t n;
  do {
    n = ::recv(sock, peek_.data(), peek_.size(), MSG_PEEK | MSG_DONTWAIT);
  } while (n < 0 && errno == EINTR);
  if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
    if (!peer_hung_up) return;
    n = 0;  // hung up with nothing sent
  }
  if (n <= 0) {  // closed by the peer, or an error
    forget(sock);
    close_(sock);
    return;
  }
  const size_t got = static_cast<size_t>(n);
  const std::string_view bytes(peek_.data(), got);
  // Search only what is new (less 3 bytes: the end may straddle the last peek).
  const size_t from = waiting.scanned >= 3 ? waiting.scanned - 3 : 0;
  const size_t end = bytes.find("\r\n\r\n", from);
  if (end != std::string_view::npos || got == peek_.size()) {
    IdleConnection ready = waiting.connection;
    ready.head_bytes = end != std::string_view::npos ? end + 4 : got;
    forget(sock);
    on_ready_(ready);
    return;
  }
  if (peer_hung_up) {  // a head that can no longer complete
    forget(sock);
    close_(sock);
    return;
  }
  waiting.scanned = got;
  if (!waiting.head_started) {
    // From the first byte the head has read_timeout to complete, however
    // slowly it trickles (httplib's timeout is per read, so a byte every few
    // seconds would hold a worker for ever).
    waiting.head_started = true;
    set_deadline(waiting, now + options_.read_timeout);
  }
}

void IdleStage::set_deadline(Waiting& waiting, Clock::time_point deadline) {
  deadlines_.erase({waiting.deadline, waiting.connection.sock});
  waiting.deadline = deadline;
  deadlines_.emplace(deadline, waiting.connection.sock);
}

void IdleStage::forget(socket_t sock) {
  auto it = waiting_.find(sock);
  if (it == waiting_.end()) return;
  deadlines_.erase({it->second.deadline, sock});
  waiting_.erase(it);
  n_waiting_ = waiting_.size();
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, sock, nullptr);
}

}  // namespace specstack
