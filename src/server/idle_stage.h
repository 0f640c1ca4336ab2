// The idle stage: where an HTTP connection waits while it holds no request,
// so that it holds no worker thread. httplib is thread-per-connection: a
// keep-alive connection between requests, or one that trickles its request
// head (slowloris), would hold a worker until its 5 s timeout, and a few
// thousand of them queue every normal request behind them.
//
// One epoll thread watches every waiting socket, edge-triggered, and peeks
// (MSG_PEEK: nothing is consumed) at what has arrived. A socket leaves for a
// worker (on_ready) once it holds a complete request head ("\r\n\r\n"), or
// more head than max_head_bytes (httplib then answers 414 / 400); it is
// closed when the peer closes, when it has been idle for keep_alive_timeout,
// or when a head that has begun has not completed within read_timeout of its
// first byte (a trickled head is closed here, never given a worker).
// Linux only (epoll, eventfd).
#pragma once

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <cstddef>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "base/status.h"

namespace specstack {

struct IdleConnection {
  socket_t sock = -1;
  size_t requests_left = 1;  // keep-alive budget: the last one is answered "Connection: close"
  size_t head_bytes = 0;     // set by the stage: the peeked head's length
};

struct IdleStageOptions {
  std::chrono::microseconds keep_alive_timeout{5'000'000};
  std::chrono::microseconds read_timeout{5'000'000};
  size_t max_head_bytes = 16 * 1024;  // httplib's limit is 8 KiB per line
};

class IdleStage {
 public:
  // Runs on the stage's thread and must not block (it enqueues on a pool).
  using Ready = std::function<void(IdleConnection)>;
  // Closes a socket the stage gives up on (the owner counts open connections).
  using Close = std::function<void(socket_t)>;

  static Result<std::unique_ptr<IdleStage>> start(IdleStageOptions options, Ready on_ready,
                                                  Close close);
  ~IdleStage();  // stop()
  IdleStage(const IdleStage&) = delete;
  IdleStage& operator=(const IdleStage&) = delete;

  // Thread-safe: a new connection, or one whose request is done. After stop()
  // it is closed at once.
  void add(IdleConnection connection);
  // Closes every waiting connection and joins the thread. Idempotent.
  void stop();
  size_t waiting() const;  // connections the stage holds now

 private:
  using Clock = std::chrono::steady_clock;
  struct Waiting {
    IdleConnection connection;
    Clock::time_point deadline;
    bool head_started = false;
    size_t scanned = 0;  // bytes already searched for the end of the head
  };

  IdleStage(IdleStageOptions options, Ready on_ready, Close close, int epoll_fd, int wake_fd);
  void loop();
  void admit(IdleConnection connection, Clock::time_point now);
  void examine(socket_t sock, bool peer_hung_up, Clock::time_point now);
  void set_deadline(Waiting& waiting, Clock::time_point deadline);
  void forget(socket_t sock);  // out of epoll and the maps; the caller closes or dispatches

  const IdleStageOptions options_;
  const Ready on_ready_;
  const Close close_;
  const int epoll_fd_;
  const int wake_fd_;  // eventfd: add() and stop() wake the loop
  std::thread thread_;

  mutable std::mutex mutex_;
  std::vector<IdleConnection> incoming_;
  bool stopping_ = false;
  std::atomic<size_t> n_waiting_{0};  // waiting_.size(), for other threads

  // Owned by the stage's thread.
  std::unordered_map<socket_t, Waiting> waiting_;
  std::set<std::pair<Clock::time_point, socket_t>> deadlines_;
  std::vector<char> peek_;
};

}  // namespace specstack
