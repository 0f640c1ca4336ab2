// The HTTP server on a free port in front of a FakeEngine whose every request
// completes with TinyStories' encoding of "Once upon a time", for the tests of
// what responses carry (usage.specprefill, usage.speculative).
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "fake_engine.h"
#include "server/http_server.h"
#include "server/openai_response.h"
#include "server_test_util.h"

namespace specstack::testing {

class FakeEngineServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = load_tinystories_tokenizer();
    ASSERT_NE(tokenizer_, nullptr);
    story_ = tokenizer_->encode("Once upon a time", false);
    engine_.script = [story = story_](const RequestOptions&) {
      return token_events(0, story, FinishReason::kFinishLength);
    };
  }

  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
  }

  // Starts the server with `options` (port, name, threads (n_threads_) and
  // polling set here) and `tokenizer` (default: TinyStories').
  void start_server(HttpServerOptions options, const Tokenizer* tokenizer = nullptr) {
    using namespace std::chrono_literals;
    options.port = 0;
    options.served_model_name = "tiny";
    options.n_threads = n_threads_;
    options.poll_interval = 5ms;
    server_ = std::make_unique<HttpServer>(engine_, tokenizer ? *tokenizer : *tokenizer_, options);
    auto port = server_->bind();
    ASSERT_TRUE(port.ok()) << port.message();
    port_ = *port;
    thread_ = std::thread([this] { EXPECT_TRUE(server_->serve().ok()); });
    for (int i = 0; i < 500 && !server_->is_running(); ++i) std::this_thread::sleep_for(2ms);
    ASSERT_TRUE(server_->is_running());
  }

  // The body of a POST that must answer 200 ("" otherwise).
  std::string post_raw(const std::string& path, const std::string& body) const {
    httplib::Client cli("127.0.0.1", port_);
    cli.set_read_timeout(10, 0);
    auto res = cli.Post(path, body, "application/json");
    EXPECT_TRUE(res);
    if (!res) return "";
    EXPECT_EQ(res->status, 200) << res->body;
    return res->body;
  }

  OrderedJson post(const std::string& path, const std::string& body) const {
    const std::string text = post_raw(path, body);
    return text.empty() ? OrderedJson() : OrderedJson::parse(text);
  }

  // The usage of the stream's last JSON chunk (the usage chunk).
  OrderedJson streamed_usage(const std::string& path, const std::string& body) const {
    const std::string text = post_raw(path, body);
    const std::string done = "data: [DONE]\n\n";
    EXPECT_GE(text.size(), done.size());
    if (text.size() < done.size()) return OrderedJson();
    EXPECT_EQ(text.substr(text.size() - done.size()), done) << text;
    const size_t end = text.size() - done.size() - 2;  // before the usage chunk's "\n\n"
    const size_t start = text.rfind("data: ", end) + 6;
    const OrderedJson chunk = OrderedJson::parse(text.substr(start, end - start));
    EXPECT_EQ(chunk["choices"], OrderedJson::array());
    return chunk["usage"];
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  std::vector<int32_t> story_;  // every request's completion
  FakeEngine engine_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
  int port_ = 0;
  int n_threads_ = 4;  // start_server's HTTP workers
};

}  // namespace specstack::testing
