// specstack serve end to end: the real binary on TinyStories with the real
// engine, driven over HTTP. Greedy completions equal the reference texts
// (alone, streamed and concurrently), stop strings cut, SIGTERM exits 0.
#include <gtest/gtest.h>
#include <httplib.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "base/mapped_file.h"
#include "cli_test_util.h"
#include "test_util.h"

namespace specstack {
namespace {

using nlohmann::json;
using testing::ServeProcess;

json post(int port, const std::string& path, const json& body) {
  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  auto res = cli.Post(path, body.dump(), "application/json");
  EXPECT_TRUE(res);
  if (!res) return json();
  EXPECT_EQ(res->status, 200) << res->body;
  return json::parse(res->body);
}

TEST(CliServe, TinyStoriesOverHttpMatchesTheReferenceAndStopsOnSigterm) {
  const std::string model = testing::golden_model_dir("tinystories-656k");
  const json reference = json::parse(read_text_file(model + "/reference.json").value())["texts"];
  ServeProcess server({"--model", model, "--served-model-name", "tiny"});
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0) << server.err();
  const std::string startup = server.err();
  EXPECT_NE(startup.find("model 'tiny': llama"), std::string::npos) << startup;
  EXPECT_NE(startup.find("weights"), std::string::npos);
  EXPECT_NE(startup.find("KV cache: "), std::string::npos);
  EXPECT_NE(startup.find("blocks x 16 tokens"), std::string::npos);

  for (const json& text : reference) {
    const json body =
        post(port, "/v1/completions",
             {{"model", "tiny"}, {"prompt", text["text"]}, {"max_tokens", 32}, {"temperature", 0}});
    EXPECT_EQ(body["choices"][0]["text"], text["greedy_text"]);
    EXPECT_EQ(body["usage"]["completion_tokens"], 32);
  }

  // Concurrent requests, batched by the engine, give the same texts.
  std::vector<std::thread> clients;
  std::vector<json> results(reference.size() * 2);
  for (size_t i = 0; i < results.size(); ++i) {
    clients.emplace_back([&, i] {
      results[i] = post(port, "/v1/completions",
                        {{"prompt", reference[i % reference.size()]["text"]},
                         {"max_tokens", 32},
                         {"temperature", 0},
                         {"n", 2}});
    });
  }
  for (auto& client : clients) client.join();
  for (size_t i = 0; i < results.size(); ++i) {
    for (int choice = 0; choice < 2; ++choice) {
      EXPECT_EQ(results[i]["choices"][choice]["text"],
                reference[i % reference.size()]["greedy_text"]);
    }
  }

  const json stopped = post(port, "/v1/completions",
                            {{"prompt", "Once upon a time"},
                             {"max_tokens", 32},
                             {"temperature", 0},
                             {"stop", " small house"}});
  EXPECT_EQ(stopped["choices"][0]["text"], ", a little girl named Lily lived in a");
  EXPECT_EQ(stopped["choices"][0]["finish_reason"], "stop");

  // Streamed: the deltas add up to the same text.
  httplib::Client cli("127.0.0.1", port);
  auto streamed = cli.Post("/v1/completions",
                           json({{"prompt", reference[0]["text"]},
                                 {"max_tokens", 32},
                                 {"temperature", 0},
                                 {"stream", true}})
                               .dump(),
                           "application/json");
  ASSERT_TRUE(streamed);
  std::string text;
  const std::regex data_line(R"(data: (\{.*\})\n\n)");
  for (std::sregex_iterator it(streamed->body.begin(), streamed->body.end(), data_line), end;
       it != end; ++it) {
    text += json::parse((*it)[1].str())["choices"][0]["text"].get<std::string>();
  }
  EXPECT_EQ(text, reference[0]["greedy_text"]);
  EXPECT_NE(streamed->body.find("data: [DONE]\n\n"), std::string::npos);

  auto metrics = cli.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("specstack_requests_finished_total"), std::string::npos);
  EXPECT_EQ(metrics->body.find("specstack_generation_tokens_total 0\n"), std::string::npos);

  EXPECT_EQ(server.stop(SIGTERM), 0) << server.err();
  // A response whose last bytes the client already has may still count as in
  // flight for a moment on the server: the drain waits for it.
  EXPECT_TRUE(std::regex_search(server.err(),
                                std::regex(R"(SIGTERM received: draining \d+ requests in flight)")))
      << server.err();
  // The pool is whole again before the process exits.
  EXPECT_TRUE(std::regex_search(server.err(), std::regex(R"(KV cache (\d+) of \1 blocks free\n)")))
      << server.err();
}

TEST(CliServe, BadStartIsOneClearError) {
  ServeProcess missing({"--model", "/nonexistent/model"});
  EXPECT_EQ(missing.wait_for_port(), 0);
  EXPECT_EQ(missing.stop(SIGTERM), 1);
  EXPECT_NE(missing.err().find("specstack: error: "), std::string::npos) << missing.err();
  EXPECT_NE(missing.err().find("/nonexistent/model"), std::string::npos) << missing.err();
}

}  // namespace
}  // namespace specstack
