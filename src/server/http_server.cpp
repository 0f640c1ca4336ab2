#include "server/http_server.h"

#include <httplib.h>
#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <string_view>

#include "chat/chat_template.h"
#include "server/api_key.h"
#include "server/completion_session.h"
#include "server/errors.h"
#include "server/in_flight.h"
#include "server/metrics.h"
#include "server/openai_request.h"
#include "server/process_memory.h"
#include "server/staged_server.h"
#include "server/structured_output.h"
#include "server/web_assets.h"
#include "server/tool_calls.h"

namespace specstack {
namespace {

using Clock = std::chrono::steady_clock;

void send_json(httplib::Response& res, int status, const OrderedJson& body) {
  res.status = status;
  res.set_content(json_text(body), "application/json");
}

void send_error(httplib::Response& res, const ApiError& error) {
  res.status = error.status;
  if (error.retry_after_seconds > 0) {
    res.set_header("Retry-After", std::to_string(error.retry_after_seconds));
  }
  res.set_content(error_body(error), "application/json");
}

const char* status_text(int status) {
  switch (status) {
    case 400:
      return "Bad Request";
    case 413:
      return "Payload Too Large";
    case 414:
      return "URI Too Long";
    case 416:
      return "Range Not Satisfiable";
    default:
      return status >= 500 ? "Internal Server Error" : "Error";
  }
}

}  // namespace

struct HttpServer::Impl {
  Impl(InferenceEngine& engine_in, const Tokenizer& tokenizer_in, HttpServerOptions options_in)
      : engine(engine_in),
        tokenizer(tokenizer_in),
        options(std::move(options_in)),
        server(StagedServerOptions{options.n_threads, options.max_connections}) {
    served.tokenizer = &tokenizer;
    served.name = options.served_model_name;
    served.max_context = engine.max_context();
    served.vocab_size = options.vocab_size > 0 ? options.vocab_size : tokenizer.vocab_size();
    served.chat_content = options.chat_content;
    served.grammars = &grammars;
    if (tokenizer.chat_template().empty()) {
      served.chat_template_error =
          "its tokenizer has no chat template (tokenizer_config.json chat_template, or a GGUF "
          "file's tokenizer.chat_template)";
    } else if (auto parsed = ChatTemplate::parse(tokenizer.chat_template()); parsed.ok()) {
      chat_template.emplace(std::move(parsed).value());
      served.chat_template = &*chat_template;
      if (auto format = detect_tool_call_format(tokenizer.chat_template()); format.ok()) {
        served.tool_format = *format;
      } else {
        served.tool_format_error = format.message();
      }
    } else {
      served.chat_template_error = "its chat template does not parse: " + parsed.message();
    }
    created = static_cast<int64_t>(std::time(nullptr));
    id_rng.seed(std::random_device{}());
    setup_routes();
    // httplib (Debian's build) listens with a backlog of 5: a burst of
    // connects overflows it and each dropped SYN costs its client a 1 s
    // retransmit. Remember the listening socket so bind() can raise it.
    server.set_socket_options([this](socket_t sock) {
      httplib::default_socket_options(sock);
      listen_socket = sock;
    });
  }

  void setup_routes();
  bool authorized(const httplib::Request& req, httplib::Response& res) const;
  void handle_completion(ApiEndpoint endpoint, const httplib::Request& req, httplib::Response& res,
                         const httplib::ContentReader& reader);
  void start_response(const std::shared_ptr<CompletionSession>& session, bool stream,
                      std::shared_ptr<InFlightRequests::Ticket> ticket, httplib::Response& res);
  // A non-streamed request with a deadline: answered here, once it ends, so
  // that a timeout can still be a 504 (the provider's 200 goes out at once).
  void respond_when_done(CompletionSession& session, httplib::Response& res);
  std::string next_id(const char* prefix);
  OrderedJson model_card() const;

  InferenceEngine& engine;
  const Tokenizer& tokenizer;
  HttpServerOptions options;
  std::optional<ChatTemplate> chat_template;
  GrammarCache grammars{tokenizer};  // response_format / grammar constraints
  ServedModel served;
  int64_t created = 0;
  // Before `server`, so it is destroyed after it: responses hold its tickets.
  InFlightRequests in_flight;
  std::atomic<bool> draining{false};
  std::atomic<bool> stopping{false};  // stop() was called
  StagedServer server;
  HttpCounters counters;
  ThroughputMeter throughput;
  std::mutex id_mutex;
  std::mt19937_64 id_rng;
  // httplib's stop() must run once, and only while listening; a stop that
  // comes before serve() is remembered here.
  std::mutex stop_mutex;
  bool stop_requested = false;
  bool stop_sent = false;
  // The listening socket, seen in httplib's socket-options hook (bind() runs
  // it on the caller's thread before serve() starts).
  socket_t listen_socket = -1;
};

std::string HttpServer::Impl::next_id(const char* prefix) {
  std::lock_guard<std::mutex> lock(id_mutex);
  return fmt::format("{}{:016x}{:08x}", prefix, id_rng(), static_cast<uint32_t>(id_rng()));
}

OrderedJson HttpServer::Impl::model_card() const {
  OrderedJson card = OrderedJson::object();
  card["id"] = served.name;
  card["object"] = "model";
  card["created"] = created;
  card["owned_by"] = "specstack";
  card["max_model_len"] = served.max_context;
  return card;
}

bool HttpServer::Impl::authorized(const httplib::Request& req, httplib::Response& res) const {
  if (options.api_key.empty()) return true;
  if (auto error = check_api_key(req.get_header_value("Authorization"), options.api_key)) {
    send_error(res, *error);
    return false;
  }
  return true;
}

void HttpServer::Impl::handle_completion(ApiEndpoint endpoint, const httplib::Request& req,
                                         httplib::Response& res,
                                         const httplib::ContentReader& reader) {
  // Counted from here, so a drain that begins after the check below still
  // waits for this request.
  std::shared_ptr<InFlightRequests::Ticket> ticket = in_flight.enter();
  // httplib enforces the limit on bodies with a Content-Length (and skips
  // the rest of them); this covers chunked uploads too. An oversized body is
  // still read, and dropped, up to a bound: clients that send the whole body
  // before reading the response would otherwise see a reset instead of the 413.
  std::string body;
  size_t received = 0;
  const size_t drain_limit = 4 * options.max_body_bytes + (size_t{1} << 20);
  const bool read_ok = reader([&](const char* data, size_t length) {
    received += length;
    if (received > options.max_body_bytes) {
      std::string().swap(body);
      return received <= drain_limit;
    }
    body.append(data, length);
    return true;
  });
  if (received > options.max_body_bytes || res.status == 413) {
    // Past the drain bound the rest is unread, so the connection cannot carry another request.
    if (!read_ok && res.status != 413) res.set_header("Connection", "close");
    send_error(res, make_api_error(413, fmt::format("request body is larger than {} bytes",
                                                    options.max_body_bytes)));
    return;
  }
  if (!read_ok) {
    res.set_header("Connection", "close");
    send_error(res, make_api_error(400, "could not read the request body"));
    return;
  }
  if (!authorized(req, res)) return;
  if (draining) {
    // Closed, so a keep-alive client's next request goes to a new connection
    // (and, behind a load balancer, to another replica).
    res.set_header("Connection", "close");
    return send_error(res, shutting_down_error("The server is shutting down and admits no new "
                                               "requests; retry on another replica or later"));
  }

  std::string error_param;
  auto request = parse_openai_request(endpoint, body, served, &error_param);
  if (!request.ok()) {
    ApiError error = api_error_from(request.error());
    if (!error_param.empty()) error.param = error_param;
    return send_error(res, error);
  }
  const bool stream = request->stream;
  ResponseHeader header;
  header.endpoint = endpoint;
  header.id = next_id(endpoint == ApiEndpoint::kApiChatCompletions ? "chatcmpl-" : "cmpl-");
  header.created = static_cast<int64_t>(std::time(nullptr));
  header.model = served.name;
  SessionOptions session_options = session_options_for(*request, std::move(header));
  session_options.specprefill_usage = options.specprefill_usage;
  session_options.specdecode_usage = options.specdecode_usage;
  if (options.specprefill_usage && request->specprefill_return_selection) {
    session_options.specprefill_selection = true;
    session_options.prompt = request->options.prompt;
    // The selection rides in the usage chunk, so a stream that asks for it gets one.
    session_options.include_usage = true;
  }
  const double timeout = request->timeout_seconds.value_or(options.request_timeout_seconds);
  if (timeout > 0) {
    session_options.timeout_seconds = timeout;
    // The clock starts before submit(): time in the engine's queue counts.
    session_options.deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(timeout));
  }

  session_options.submitted_at = Clock::now();
  auto submitted = engine.submit(std::move(request->options));
  if (!submitted.ok()) return send_error(res, api_error_from(submitted.error()));
  auto session = std::make_shared<CompletionSession>(tokenizer, std::move(session_options),
                                                     std::move(submitted).value());
  ticket->attach(session);
  if (!stream && timeout > 0) return respond_when_done(*session, res);
  start_response(session, stream, std::move(ticket), res);
}

void HttpServer::Impl::respond_when_done(CompletionSession& session, httplib::Response& res) {
  // No heartbeat can go out before the status line, so a client that goes
  // away is not noticed here; the deadline bounds what it can cost.
  while (!session.finished()) {
    // stop() cuts streams at once; this one would otherwise run to its deadline.
    if (stopping) session.request_shutdown();
    session.poll(options.poll_interval);
  }
  if (session.ended_early()) return send_error(res, session.end_error());
  send_json(res, 200, session.response());
}

void HttpServer::Impl::start_response(const std::shared_ptr<CompletionSession>& session,
                                      bool stream, std::shared_ptr<InFlightRequests::Ticket> ticket,
                                      httplib::Response& res) {
  res.status = 200;
  if (stream) {
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");  // reverse proxies: do not buffer SSE
  }
  auto last_write = std::make_shared<Clock::time_point>(Clock::now());
  const HttpServerOptions& opts = options;
  // The provider runs on this worker thread after the handler returns; it
  // returns false (ending the response) when a write fails, i.e. the client
  // has gone. The releaser runs however the response ends.
  auto provider = [session, stream, last_write, &opts](size_t, httplib::DataSink& sink) {
    std::string out;
    if (stream) {
      out = session->poll_stream(opts.poll_interval);
    } else {
      session->poll(opts.poll_interval);
      if (session->finished()) out = json_text(session->response());
    }
    const Clock::time_point now = Clock::now();
    if (out.empty() && now - *last_write >= opts.heartbeat_interval) {
      out = stream ? ": keep-alive\n\n" : " ";  // an SSE comment / JSON whitespace
    }
    if (!out.empty()) {
      if (!sink.write(out.data(), out.size())) {
        session->cancel();
        return false;
      }
      *last_write = now;
    }
    if (session->finished()) sink.done();
    return true;
  };
  // The ticket goes with the releaser: the request stays in flight until
  // httplib is done with the response.
  auto releaser = [session, ticket = std::move(ticket)](bool) { session->cancel(); };
  res.set_chunked_content_provider(stream ? "text/event-stream" : "application/json",
                                   std::move(provider), std::move(releaser));
}

void HttpServer::Impl::setup_routes() {
  server.set_payload_max_length(options.max_body_bytes);
  const auto read_us = options.read_timeout.count();
  server.set_read_timeout(read_us / 1'000'000, read_us % 1'000'000);
  server.set_keep_alive_timeout(options.keep_alive_timeout.count());
  server.set_keep_alive_max_count(options.keep_alive_max_requests);

  server.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res,
                                        const httplib::ContentReader& reader) {
    handle_completion(ApiEndpoint::kApiCompletions, req, res, reader);
  });
  server.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res,
                                             const httplib::ContentReader& reader) {
    handle_completion(ApiEndpoint::kApiChatCompletions, req, res, reader);
  });
  server.Get("/v1/models", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    OrderedJson list = OrderedJson::object();
    list["object"] = "list";
    list["data"] = OrderedJson::array({model_card()});
    send_json(res, 200, list);
  });
  server.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
    if (!authorized(req, res)) return;
    if (req.matches[1] != served.name) {
      return send_error(
          res,
          make_api_error(404, fmt::format("The model '{}' does not exist", req.matches[1].str()),
                         "model_not_found"));
    }
    send_json(res, 200, model_card());
  });
  // 503 while draining, so a load balancer stops routing here.
  server.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
    if (draining) return send_json(res, 503, OrderedJson{{"status", "draining"}});
    send_json(res, 200, OrderedJson{{"status", "ok"}});
  });
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    const EngineMetrics metrics = engine.metrics();
    const ThroughputRates rates = throughput.observe(Clock::now(), metrics.prompt_tokens_total,
                                                     metrics.generation_tokens_total);
    res.status = 200;
    MemoryGauges memory;
    memory.process_resident_bytes = process_resident_bytes();
    const HeapStats heap = heap_stats();
    memory.heap_in_use_bytes = heap.in_use_bytes;
    memory.heap_held_bytes = heap.held_bytes;
    memory.engine = engine.memory_metrics();
    ConnectionGauges connections;
    connections.open = static_cast<int64_t>(server.open_connections());
    connections.idle = static_cast<int64_t>(server.idle_connections());
    res.set_content(render_prometheus(metrics, counters.snapshot(), rates, memory, connections),
                    "text/plain; version=0.0.4; charset=utf-8");
  });

  // The web UI. Open like /health: the page itself holds no secret, and it
  // asks for the API key before its first /v1 call.
  if (options.web_ui) {
    server.Get(R"(/|/assets/[A-Za-z0-9_.-]+)", [](const httplib::Request& req,
                                                  httplib::Response& res) {
      const WebAsset* asset = find_web_asset(req.path);
      if (asset == nullptr) {
        return send_error(res, make_api_error(404, fmt::format("Unknown route: GET {}", req.path)));
      }
      WebResponse web = web_asset_response(*asset, req.get_header_value("If-None-Match"));
      res.status = web.status;
      for (auto& [name, value] : web.headers) res.set_header(name, value);
      if (web.status == 200) res.set_content(std::string(web.body), std::string(web.content_type));
    });
  }

  // Known paths with the wrong method get 405 instead of httplib's 404.
  auto not_allowed = [](const char* allow) {
    return [allow](const httplib::Request& req, httplib::Response& res) {
      res.set_header("Allow", allow);
      send_error(res, make_api_error(405, fmt::format("Method {} is not allowed for {}; use {}",
                                                      req.method, req.path, allow)));
    };
  };
  for (const char* path : {"/v1/completions", "/v1/chat/completions"}) {
    server.Get(path, not_allowed("POST"));
    server.Put(path, not_allowed("POST"));
    server.Patch(path, not_allowed("POST"));
    server.Delete(path, not_allowed("POST"));
  }
  for (const char* path : {"/v1/models", R"(/v1/models/(.+))", "/health", "/metrics"}) {
    server.Post(path, not_allowed("GET"));
    server.Put(path, not_allowed("GET"));
    server.Patch(path, not_allowed("GET"));
    server.Delete(path, not_allowed("GET"));
  }

  // Every error httplib produces itself (no route, body too large, bad HTTP)
  // gets the OpenAI error shape; handlers' own errors already have a body.
  httplib::Server::HandlerWithResponse on_error = [](const httplib::Request& req,
                                                     httplib::Response& res) {
    if (!res.body.empty() || res.content_provider_) {
      return httplib::Server::HandlerResponse::Unhandled;
    }
    std::string message;
    switch (res.status) {
      case 404:
        message = fmt::format("Unknown route: {} {}", req.method, req.path);
        break;
      case 413:
        message = "request body is too large";
        res.set_header("Connection", "close");
        break;
      default:
        message = fmt::format("{} {}", res.status, status_text(res.status));
    }
    ApiError error = make_api_error(res.status, std::move(message));
    res.set_content(error_body(error), "application/json");
    return httplib::Server::HandlerResponse::Handled;
  };
  server.set_error_handler(std::move(on_error));
  server.set_exception_handler(
      [](const httplib::Request&, httplib::Response& res, std::exception_ptr error) {
        std::string what = "internal error";
        try {
          if (error) std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = std::string("internal error: ") + e.what();
        } catch (...) {
        }
        send_error(res, make_api_error(500, what));
      });
  server.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
    counters.record(res.status);
    if (options.access_log) {
      std::fprintf(stderr, "specstack: %s %s %s %d\n", req.remote_addr.c_str(), req.method.c_str(),
                   req.path.c_str(), res.status);
    }
  });
}

HttpServer::HttpServer(InferenceEngine& engine, const Tokenizer& tokenizer,
                       HttpServerOptions options)
    : impl_(std::make_unique<Impl>(engine, tokenizer, std::move(options))) {}

HttpServer::~HttpServer() {
  stop();
}

Result<int> HttpServer::bind() {
  const std::string& host = impl_->options.host;
  int port = impl_->options.port;
  if (port == 0) {
    port = impl_->server.bind_to_any_port(host);
    if (port < 0) return errorf("cannot bind to {} (any port)", host);
  } else if (!impl_->server.bind_to_port(host, port)) {
    return errorf("cannot bind to {}:{} (in use, or not a local address?)", host, port);
  }
  // listen() again on a listening socket only changes its backlog (Linux);
  // the kernel caps it at net.core.somaxconn.
  if (impl_->listen_socket >= 0 &&
      ::listen(impl_->listen_socket, impl_->options.listen_backlog) != 0) {
    return errorf("cannot set the listen backlog to {}: {}", impl_->options.listen_backlog,
                  std::strerror(errno));
  }
  return port;
}

Status HttpServer::serve() {
  {
    std::lock_guard<std::mutex> lock(impl_->stop_mutex);
    if (impl_->stop_requested) return Status::ok_status();
  }
  SS_TRY(impl_->server.start());
  const bool listened = impl_->server.listen_after_bind();
  // Closes the idle connections and waits for the requests in flight.
  impl_->server.finish();
  if (!listened) return make_error("the HTTP listener failed");
  return Status::ok_status();
}

void HttpServer::stop() {
  impl_->stopping = true;
  std::lock_guard<std::mutex> lock(impl_->stop_mutex);
  impl_->stop_requested = true;
  // A stop racing with serve()'s start finds it not running yet; callers
  // that must not miss it (the signal watcher) call stop() again.
  if (!impl_->stop_sent && impl_->server.is_running()) {
    impl_->server.stop();
    impl_->stop_sent = true;
  }
}

bool HttpServer::is_running() const {
  return impl_->server.is_running();
}

void HttpServer::begin_drain() {
  impl_->draining = true;
}

bool HttpServer::draining() const {
  return impl_->draining;
}

int64_t HttpServer::in_flight() const {
  return impl_->in_flight.count();
}

int64_t HttpServer::shutdown_in_flight() {
  return impl_->in_flight.shutdown_all();
}

int64_t HttpServer::open_connections() const {
  return static_cast<int64_t>(impl_->server.open_connections());
}

const std::string& HttpServer::chat_template_error() const {
  return impl_->served.chat_template_error;
}

}  // namespace specstack
