// The OpenAI-compatible HTTP server (cpp-httplib): POST /v1/completions,
// POST /v1/chat/completions (SSE when stream is true), GET /v1/models,
// GET /health and GET /metrics, and the web UI at / (web_assets.h). Worker threads parse and
// tokenize requests, submit them to the InferenceEngine and turn its token streams into text; they
// never touch model state. httplib stays out of this header.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/status.h"
#include "engine/engine_api.h"
#include "server/openai_request.h"
#include "tokenizer/tokenizer.h"

namespace specstack {

struct HttpServerOptions {
  std::string host = "127.0.0.1";  // loopback unless told otherwise
  int port = 8000;                 // 0: any free port (bind() returns it)
  std::string api_key;             // non-empty: /v1/* needs "Authorization: Bearer <key>"
  std::string served_model_name;   // the `model` requests must name (or omit)
  size_t max_body_bytes = size_t{8} << 20;
  // Every in-flight request holds one worker thread for its whole duration
  // (a streamed one until its last event), so this bounds concurrent
  // requests. Idle keep-alive connections, and connections whose request head
  // is still arriving, hold none (staged_server.h).
  int n_threads = 64;
  // Open connections, idle ones included; past it a new connection gets a
  // 503 and is closed. Each costs a file descriptor.
  size_t max_connections = 8192;
  // A request head must arrive within this of its first byte, and each later
  // read of the body (or write of the response) within this of the last one.
  std::chrono::microseconds read_timeout{5'000'000};
  // An open connection with no request in it is closed after this long.
  std::chrono::seconds keep_alive_timeout{5};
  // Requests one connection may carry; the last is answered "Connection:
  // close". httplib's own 5 made busy clients reconnect every 5 requests; an
  // idle connection costs no thread here, so allow as many as nginx does.
  size_t keep_alive_max_requests = 1000;
  // Pending connections the kernel queues before accept(); a burst past it
  // loses SYNs, which clients retry only after a second.
  int listen_backlog = 1024;
  int64_t vocab_size = 0;  // prompt token ids must be below it; 0: the tokenizer's
  // How long a response writer waits for engine events before checking the
  // connection again.
  std::chrono::milliseconds poll_interval{50};
  // After this long without writing, a response writes a no-op (an SSE comment,
  // or a space before the JSON body) so a vanished client is noticed and its
  // request cancelled even while it waits in the queue.
  std::chrono::milliseconds heartbeat_interval{1000};
  bool access_log = false;  // one stderr line per response
  // Serve the built-in web UI (web_assets.h) at / and /assets/. Off here so a
  // server built in a test answers only the API; `serve` turns it on unless
  // --no-web-ui.
  bool web_ui = false;
  // The engine has a draft for speculative prefill: usage gains `specprefill`.
  bool specprefill_usage = false;
  // The engine runs speculative decoding (--spec-decode): usage gains `speculative`.
  bool specdecode_usage = false;
  // Every completion request's deadline in seconds unless it sets its own
  // (`timeout`); 0: none.
  double request_timeout_seconds = 0;
  // Whether chat request text may produce special tokens (openai_request.h).
  ChatContentTokens chat_content = ChatContentTokens::kPlainText;
};

class HttpServer {
 public:
  // The engine and tokenizer must outlive the server. The tokenizer's chat
  // template is parsed here; if it fails, chat requests get a 400 that says why.
  HttpServer(InferenceEngine& engine, const Tokenizer& tokenizer, HttpServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds the listening socket; returns the port (the chosen one for port 0).
  Result<int> bind();
  // Serves on the bound socket until stop(); blocks.
  Status serve();
  // Thread-safe and idempotent: closes the listener; serve() returns once the
  // workers are done (streaming responses end at their next poll).
  void stop();
  bool is_running() const;

  // Graceful drain, thread-safe. begin_drain(): from now on /health answers
  // 503 and new completion requests get 503 "server_shutting_down" with
  // Retry-After; requests already admitted run on. in_flight(): requests
  // still being handled or written (stop() once it is 0, or streams are cut).
  // shutdown_in_flight(): ends them all within one poll interval with
  // finish_reason "shutdown"; returns how many it asked.
  void begin_drain();
  bool draining() const;
  int64_t in_flight() const;
  int64_t shutdown_in_flight();
  // Connections open now, idle ones included.
  int64_t open_connections() const;

  // "" when the chat template parsed (or there is none).
  const std::string& chat_template_error() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace specstack
