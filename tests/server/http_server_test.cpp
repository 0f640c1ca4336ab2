// The server over real sockets on 127.0.0.1 (a free port) with a FakeEngine:
// responses, SSE, every error status the issue lists, and cancel() on
// client disconnect.
#include "server/http_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <thread>

#include "fake_engine.h"
#include "server/openai_response.h"
#include "server/request_fields.h"
#include "server_test_util.h"

namespace specstack {
namespace {

using testing::FakeEngine;
using testing::token_events;
using namespace std::chrono_literals;

class HttpServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = testing::load_tinystories_tokenizer();
    ASSERT_NE(tokenizer_, nullptr);
    engine_.script = [this](const RequestOptions& options) {
      std::vector<RequestEvent> events;
      for (int32_t choice = 0; choice < options.n; ++choice) {
        for (RequestEvent& event : token_events(choice, story_, FinishReason::kFinishLength)) {
          events.push_back(std::move(event));
        }
      }
      return events;
    };
    story_ = tokenizer_->encode("Once upon a time there was a cat", false);
  }

  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
  }

  void start(HttpServerOptions options = {}, const Tokenizer* tokenizer = nullptr) {
    options.port = 0;
    options.served_model_name = "tiny";
    options.n_threads = 4;
    options.poll_interval = 5ms;
    if (options.heartbeat_interval == HttpServerOptions{}.heartbeat_interval) {
      options.heartbeat_interval = 10s;  // tests that want heartbeats set their own
    }
    server_ = std::make_unique<HttpServer>(engine_, tokenizer ? *tokenizer : *tokenizer_, options);
    auto port = server_->bind();
    ASSERT_TRUE(port.ok()) << port.message();
    port_ = *port;
    thread_ = std::thread([this] { EXPECT_TRUE(server_->serve().ok()); });
    for (int i = 0; i < 500 && !server_->is_running(); ++i) std::this_thread::sleep_for(2ms);
    ASSERT_TRUE(server_->is_running());
  }

  httplib::Client client() const {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_read_timeout(10, 0);
    return cli;
  }

  static OrderedJson error_of(const httplib::Result& res) {
    EXPECT_TRUE(res);
    if (!res) return OrderedJson();
    EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
    OrderedJson body = OrderedJson::parse(res->body);
    EXPECT_TRUE(body.contains("error")) << res->body;
    EXPECT_TRUE(body["error"].contains("message"));
    EXPECT_TRUE(body["error"].contains("type"));
    EXPECT_TRUE(body["error"].contains("param"));
    EXPECT_TRUE(body["error"].contains("code"));
    return body["error"];
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int32_t> story_;
  FakeEngine engine_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
};

TEST_F(HttpServerTest, HealthModelsAndCompletion) {
  start();
  httplib::Client cli = client();
  auto health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);

  auto models = cli.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 200);
  const OrderedJson list = OrderedJson::parse(models->body);
  EXPECT_EQ(list["object"], "list");
  EXPECT_EQ(list["data"][0]["id"], "tiny");
  EXPECT_EQ(list["data"][0]["max_model_len"], 256);
  auto one = cli.Get("/v1/models/tiny");
  ASSERT_TRUE(one);
  EXPECT_EQ(one->status, 200);

  auto res = cli.Post("/v1/completions",
                      R"({"model": "tiny", "prompt": "Hello", "max_tokens": 8, "n": 2})",
                      "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200) << res->body;
  EXPECT_EQ(res->get_header_value("Content-Type"), "application/json");
  const OrderedJson body = OrderedJson::parse(res->body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["id"].get<std::string>().rfind("cmpl-", 0), 0u);
  EXPECT_EQ(body["model"], "tiny");
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][1]["text"], "Once upon a time there was a cat");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 2 * static_cast<int64_t>(story_.size()));
  // What reached the engine.
  const std::vector<RequestOptions> submitted = engine_.submitted();
  ASSERT_EQ(submitted.size(), 1u);
  EXPECT_EQ(submitted[0].prompt, tokenizer_->encode("Hello", true));
  EXPECT_EQ(submitted[0].params.max_tokens, 8);
  EXPECT_EQ(submitted[0].n, 2);
  EXPECT_EQ(body["usage"]["prompt_tokens"], static_cast<int64_t>(submitted[0].prompt.size()));
}

TEST_F(HttpServerTest, StreamingSendsChunksThenDone) {
  start();
  httplib::Client cli = client();
  auto res =
      cli.Post("/v1/completions",
               R"({"prompt": "Hello", "stream": true, "stream_options": {"include_usage": true}})",
               "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  EXPECT_EQ(res->get_header_value("Cache-Control"), "no-cache");
  const std::string& text = res->body;
  ASSERT_GE(text.size(), kSseDone.size());
  EXPECT_EQ(text.substr(text.size() - kSseDone.size()), kSseDone);
  std::string story;
  int n_events = 0;
  bool saw_usage = false;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find("\n\n", at);
    ASSERT_NE(end, std::string::npos);
    const std::string line = text.substr(at, end - at);
    at = end + 2;
    ASSERT_EQ(line.rfind("data: ", 0), 0u) << line;
    if (line == "data: [DONE]") break;
    const OrderedJson chunk = OrderedJson::parse(line.substr(6));
    ++n_events;
    if (chunk["choices"].empty()) {
      saw_usage = true;
      EXPECT_EQ(chunk["usage"]["completion_tokens"], static_cast<int64_t>(story_.size()));
    } else {
      story += chunk["choices"][0]["text"].get<std::string>();
    }
  }
  EXPECT_EQ(story, "Once upon a time there was a cat");
  EXPECT_TRUE(saw_usage);
  EXPECT_GE(n_events, 3);
}

TEST_F(HttpServerTest, ApiKeyGuardsV1Only) {
  HttpServerOptions options;
  options.api_key = "sekrit";
  start(options);
  httplib::Client cli = client();
  auto missing = cli.Post("/v1/completions", R"({"prompt": "x"})", "application/json");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 401);
  EXPECT_EQ(error_of(missing)["code"], "invalid_api_key");
  auto wrong = cli.Post("/v1/completions", {{"Authorization", "Bearer sekrix"}},
                        R"({"prompt": "x"})", "application/json");
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->status, 401);
  auto models = cli.Get("/v1/models");
  ASSERT_TRUE(models);
  EXPECT_EQ(models->status, 401);
  auto right = cli.Post("/v1/completions", {{"Authorization", "Bearer sekrit"}},
                        R"({"prompt": "x"})", "application/json");
  ASSERT_TRUE(right);
  EXPECT_EQ(right->status, 200) << right->body;
  auto health = cli.Get("/health");
  ASSERT_TRUE(health);
  EXPECT_EQ(health->status, 200);
  EXPECT_TRUE(engine_.submitted().size() == 1u);  // rejected requests never reached the engine
}

TEST_F(HttpServerTest, ErrorStatuses) {
  HttpServerOptions options;
  options.max_body_bytes = 1024;
  start(options);
  httplib::Client cli = client();

  auto route = cli.Get("/v1/nothing");
  ASSERT_TRUE(route);
  EXPECT_EQ(route->status, 404);
  EXPECT_NE(error_of(route)["message"].get<std::string>().find("/v1/nothing"), std::string::npos);

  auto model =
      cli.Post("/v1/completions", R"({"model": "gpt-4", "prompt": "x"})", "application/json");
  ASSERT_TRUE(model);
  EXPECT_EQ(model->status, 404);
  EXPECT_NE(error_of(model)["message"].get<std::string>().find("gpt-4"), std::string::npos);

  auto method = cli.Get("/v1/completions");
  ASSERT_TRUE(method);
  EXPECT_EQ(method->status, 405);
  EXPECT_EQ(method->get_header_value("Allow"), "POST");
  error_of(method);
  auto method2 = cli.Post("/health", "{}", "application/json");
  ASSERT_TRUE(method2);
  EXPECT_EQ(method2->status, 405);

  auto malformed = cli.Post("/v1/completions", R"({"prompt": )", "application/json");
  ASSERT_TRUE(malformed);
  EXPECT_EQ(malformed->status, 400);
  EXPECT_NE(error_of(malformed)["message"].get<std::string>().find("not valid JSON"),
            std::string::npos);

  auto type = cli.Post("/v1/chat/completions", R"({"messages": [], "temperature": "x"})",
                       "application/json");
  ASSERT_TRUE(type);
  EXPECT_EQ(type->status, 400);
  EXPECT_EQ(error_of(type)["type"], "invalid_request_error");

  auto context =
      cli.Post("/v1/completions", R"({"prompt": "x", "max_tokens": 1000})", "application/json");
  ASSERT_TRUE(context);
  EXPECT_EQ(context->status, 400);
  EXPECT_NE(error_of(context)["message"].get<std::string>().find("maximum context length is 256"),
            std::string::npos);

  const std::string big = R"({"prompt": ")" + std::string(2000, 'a') + R"("})";
  httplib::Client fresh = client();
  auto too_big = fresh.Post("/v1/completions", big, "application/json");
  ASSERT_TRUE(too_big);
  EXPECT_EQ(too_big->status, 413);
  error_of(too_big);
  EXPECT_TRUE(engine_.submitted().empty());

  // The counters saw every response. httplib counts a response just after
  // writing it, so the last one may land a moment after the client has it.
  std::string text;
  for (int i = 0; i < 200; ++i) {
    auto metrics = client().Get("/metrics");
    ASSERT_TRUE(metrics);
    EXPECT_EQ(metrics->status, 200);
    text = metrics->body;
    if (text.find("specstack_http_requests_total{code=\"413\"} 1") != std::string::npos) break;
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_NE(text.find("specstack_http_requests_total{code=\"404\"} 2"), std::string::npos) << text;
  EXPECT_NE(text.find("specstack_http_requests_total{code=\"405\"} 2"), std::string::npos);
  EXPECT_NE(text.find("specstack_http_requests_total{code=\"413\"} 1"), std::string::npos);
}

TEST_F(HttpServerTest, ChunkedUploadsObeyTheBodyLimit) {
  HttpServerOptions options;
  options.max_body_bytes = 1024;
  start(options);
  httplib::Client cli = client();
  const std::string big = R"({"prompt": ")" + std::string(4000, 'a') + R"("})";
  auto res = cli.Post(
      "/v1/completions",
      [&](size_t offset, httplib::DataSink& sink) {
        sink.write(big.data() + offset, std::min<size_t>(500, big.size() - offset));
        if (offset + 500 >= big.size()) sink.done();
        return true;
      },
      "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 413);
  EXPECT_TRUE(engine_.submitted().empty());
}

TEST_F(HttpServerTest, QueueFullIs429WithRetryAfter) {
  engine_.submit_error =
      make_error("waiting queue is full (1024 requests)", ErrorCode::kErrorResourceExhausted);
  start();
  auto res = client().Post("/v1/completions", R"({"prompt": "x"})", "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 429);
  EXPECT_EQ(res->get_header_value("Retry-After"), "1");
  EXPECT_EQ(error_of(res)["message"], "waiting queue is full (1024 requests)");
}

TEST_F(HttpServerTest, ClientDisconnectMidStreamCancels) {
  engine_.endless = true;
  engine_.script = nullptr;
  start();
  httplib::Client cli = client();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = R"({"prompt": "x", "stream": true, "max_tokens": 200})";
  req.set_header("Content-Type", "application/json");
  int n_chunks = 0;
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
    return ++n_chunks < 3;  // hang up after a few chunks
  };
  auto res = cli.send(req);
  EXPECT_GE(n_chunks, 3);
  std::shared_ptr<testing::FakeStream> stream;
  for (int i = 0; i < 1000; ++i) {
    stream = engine_.stream(0);
    if (stream && stream->cancelled()) break;
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_NE(stream, nullptr);
  EXPECT_TRUE(stream->cancelled());
}

TEST_F(HttpServerTest, StopEndsServeWithAStreamInFlight) {
  engine_.endless = true;
  engine_.script = nullptr;
  start();
  std::thread streaming([this] {
    httplib::Client cli = client();
    cli.Post("/v1/completions", R"({"prompt": "x", "stream": true})", "application/json");
  });
  for (int i = 0; i < 1000 && !engine_.stream(0); ++i) std::this_thread::sleep_for(2ms);
  ASSERT_NE(engine_.stream(0), nullptr);
  server_->stop();
  thread_.join();  // serve() returned
  streaming.join();
  for (int i = 0; i < 1000 && !engine_.stream(0)->cancelled(); ++i)
    std::this_thread::sleep_for(2ms);
  EXPECT_TRUE(engine_.stream(0)->cancelled());
}

TEST_F(HttpServerTest, SlowResponsesSendHeartbeatsAndStayParseable) {
  engine_.script = nullptr;  // events are pushed by hand below
  HttpServerOptions options;
  options.heartbeat_interval = 10ms;
  start(options);
  auto feed = [this] {
    std::shared_ptr<testing::FakeStream> stream;
    for (int i = 0; i < 1000 && !(stream = engine_.stream(0)); ++i)
      std::this_thread::sleep_for(2ms);
    std::this_thread::sleep_for(80ms);
    for (RequestEvent& event : token_events(0, story_, FinishReason::kFinishLength)) {
      stream->push(std::move(event));
    }
  };
  std::thread feeder(feed);
  auto res = client().Post("/v1/completions", R"({"prompt": "x"})", "application/json");
  feeder.join();
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  ASSERT_FALSE(res->body.empty());
  EXPECT_EQ(res->body[0], ' ');  // heartbeats are JSON whitespace
  EXPECT_EQ(OrderedJson::parse(res->body)["choices"][0]["text"],
            "Once upon a time there was a cat");
}

TEST_F(HttpServerTest, ClientGivingUpOnANonStreamingRequestCancels) {
  engine_.script = nullptr;  // never finishes
  HttpServerOptions options;
  options.heartbeat_interval = 10ms;
  start(options);
  httplib::Client cli = client();
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = R"({"prompt": "x"})";
  req.set_header("Content-Type", "application/json");
  bool got_heartbeat = false;
  req.content_receiver = [&](const char* data, size_t length, uint64_t, uint64_t) {
    got_heartbeat = length > 0 && data[0] == ' ';
    return false;  // the client hangs up at the first byte
  };
  auto res = cli.send(req);
  EXPECT_TRUE(got_heartbeat);
  std::shared_ptr<testing::FakeStream> stream;
  for (int i = 0; i < 1000; ++i) {
    stream = engine_.stream(0);
    if (stream && stream->cancelled()) break;
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_NE(stream, nullptr);
  EXPECT_TRUE(stream->cancelled());
}

TEST_F(HttpServerTest, ChatCompletionWithTheLlama3Template) {
  std::unique_ptr<Tokenizer> llama = testing::load_llama3_tokenizer();
  if (!llama) GTEST_SKIP() << "npm llama3 tokenizer not installed";
  const std::vector<int32_t> reply = llama->encode("Paris is the capital.", false);
  const int32_t eot = *llama->token_to_id("<|eot_id|>");
  engine_.script = [&](const RequestOptions&) {
    std::vector<int32_t> tokens = reply;
    tokens.push_back(eot);  // the engine reports EOS with the stop token included
    return token_events(0, tokens, FinishReason::kFinishStop);
  };
  start({}, llama.get());
  auto res = client().Post(
      "/v1/chat/completions",
      R"({"model": "tiny", "messages": [{"role": "user", "content": "Capital of France?"}]})",
      "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const OrderedJson body = OrderedJson::parse(res->body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["id"].get<std::string>().rfind("chatcmpl-", 0), 0u);
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Paris is the capital.");  // EOS text skipped
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  const std::vector<RequestOptions> submitted = engine_.submitted();
  ASSERT_EQ(submitted.size(), 1u);
  EXPECT_EQ(llama->decode(submitted[0].prompt),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nCapital of France?"
            "<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  // Chat's default max_tokens: the rest of the context.
  EXPECT_EQ(submitted[0].params.max_tokens, 256 - static_cast<int32_t>(submitted[0].prompt.size()));
}

}  // namespace
}  // namespace specstack
