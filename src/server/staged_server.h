// httplib::Server with its connections split in two stages: the idle stage
// (idle_stage.h) holds a connection while no request is in it, and a worker
// of a LifoThreadPool holds it only while one request is read, handled and
// answered. So --http-threads bounds the requests being processed, not the
// open connections; those are bounded by max_connections.
//
// httplib's accept loop hands each accepted socket to process_and_close_socket
// (a private virtual, as SSLServer overrides it) through its task queue; here
// that queue runs the call inline, and the override only registers the socket
// with the idle stage, so the accept loop never waits. A worker runs one
// request with httplib's process_request on a fresh stream, as httplib's own
// keep-alive loop does, then hands the socket back or closes it.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "base/status.h"
#include "server/idle_stage.h"
#include "server/lifo_thread_pool.h"

namespace specstack {

struct StagedServerOptions {
  int n_threads = 64;             // workers: requests processed at once
  size_t max_connections = 8192;  // open connections; beyond it new ones get a 503 and are closed
};

class StagedServer final : public httplib::Server {
 public:
  explicit StagedServer(StagedServerOptions options);
  ~StagedServer() override;

  // Around httplib's listen_after_bind(): start() before it (reads the
  // timeouts set on httplib), finish() after it returns (closes the idle
  // connections at once, then waits for the workers' requests to end).
  Status start();
  void finish();

  size_t open_connections() const { return open_; }
  size_t idle_connections() const;  // of those, in the idle stage

 private:
  bool process_and_close_socket(socket_t sock) override;
  void serve_one(IdleConnection connection);
  void close_connection(socket_t sock);
  void reject(socket_t sock);

  const StagedServerOptions options_;
  std::atomic<size_t> open_{0};
  // The pool is shut down (its workers joined) before the stage is destroyed:
  // workers hand sockets back to the stage until their last request ends.
  std::unique_ptr<IdleStage> stage_;
  std::unique_ptr<LifoThreadPool> pool_;
};

}  // namespace specstack
