#include "server/staged_server.h"

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "server/connection_stream.h"
#include "server/errors.h"

namespace specstack {
namespace {

// httplib's accept loop enqueues each socket here; the call only registers
// it with the idle stage, so running it inline keeps the loop accepting.
class InlineTaskQueue final : public httplib::TaskQueue {
 public:
  void enqueue(std::function<void()> fn) override { fn(); }
  void shutdown() override {}
};

std::chrono::microseconds duration(time_t sec, time_t usec) {
  return std::chrono::seconds(sec) + std::chrono::microseconds(usec);
}

}  // namespace

StagedServer::StagedServer(StagedServerOptions options) : options_(options) {
  new_task_queue = [] { return new InlineTaskQueue; };
}

StagedServer::~StagedServer() {
  finish();
}

Status StagedServer::start() {
  // The pool first: the stage's thread enqueues on it.
  pool_ = std::make_unique<LifoThreadPool>(static_cast<size_t>(std::max(1, options_.n_threads)));
  IdleStageOptions stage_options;
  stage_options.keep_alive_timeout = duration(keep_alive_timeout_sec_, 0);
  stage_options.read_timeout = duration(read_timeout_sec_, read_timeout_usec_);
  auto stage = IdleStage::start(
      stage_options,
      [this](IdleConnection connection) {
        pool_->enqueue([this, connection] { serve_one(connection); });
      },
      [this](socket_t sock) { close_connection(sock); });
  if (!stage.ok()) {
    pool_.reset();
    return stage.error();
  }
  stage_ = std::move(stage).value();
  return Status::ok_status();
}

void StagedServer::finish() {
  if (stage_) stage_->stop();    // idle connections close now; later hand-backs close too
  if (pool_) pool_->shutdown();  // requests in flight end as they would have
  pool_.reset();
  stage_.reset();
}

size_t StagedServer::idle_connections() const {
  return stage_ ? stage_->waiting() : 0;
}

bool StagedServer::process_and_close_socket(socket_t sock) {
  if (!stage_ || open_.load() >= options_.max_connections) {
    reject(sock);
    return false;
  }
  ++open_;
  // Responses go out in several small writes (head, body, SSE events); with
  // Nagle each one after the first waits for the client's delayed ACK (~40 ms).
  const int one = 1;
  ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  stage_->add(IdleConnection{sock, std::max<size_t>(1, keep_alive_max_count_), 0});
  return true;
}

void StagedServer::serve_one(IdleConnection connection) {
  ConnectionStreamOptions stream_options;
  stream_options.read_timeout = duration(read_timeout_sec_, read_timeout_usec_);
  stream_options.write_timeout = duration(write_timeout_sec_, write_timeout_usec_);
  ConnectionStream stream(connection.sock, connection.head_bytes, stream_options);
  // As httplib's keep-alive loop: the last request the budget allows is
  // answered "Connection: close".
  const bool close_after = connection.requests_left <= 1;
  bool closed = false;
  const bool ok = process_request(stream, close_after, closed, nullptr);
  if (ok && !closed && !close_after && svr_sock_ != INVALID_SOCKET) {
    --connection.requests_left;
    stage_->add(connection);
  } else {
    close_connection(connection.sock);
  }
}

void StagedServer::close_connection(socket_t sock) {
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  --open_;
}

void StagedServer::reject(socket_t sock) {
  // Best effort and never blocking (this is the accept loop): an empty
  // socket's send buffer takes the whole answer.
  const std::string body = error_body(make_api_error(
      503, "The server has too many open connections; retry later", "too_many_connections"));
  const std::string response =
      "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
      "Retry-After: 1\r\nConnection: close\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  [[maybe_unused]] ssize_t n =
      ::send(sock, response.data(), response.size(), MSG_DONTWAIT | MSG_NOSIGNAL);
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
}

}  // namespace specstack
