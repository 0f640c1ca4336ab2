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
#include "test_util.h"

namespace specstack {
namespace {

using nlohmann::json;

// A `specstack serve --port 0` child whose stderr is collected.
class ServeProcess {
 public:
  explicit ServeProcess(const std::vector<std::string>& extra_args) {
    int fds[2];
    if (::pipe(fds) != 0) return;
    std::vector<std::string> args = {
        testing::specstack_binary(), "serve", "--port", "0", "--threads", "2"};
    args.insert(args.end(), extra_args.begin(), extra_args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(fds[1], STDERR_FILENO);
      ::close(fds[0]);
      ::close(fds[1]);
      std::vector<char*> argv;
      for (auto& arg : args) argv.push_back(arg.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    reader_ = std::thread([this, fd = fds[0]] {
      char buffer[4096];
      ssize_t n;
      while ((n = ::read(fd, buffer, sizeof(buffer))) > 0) {
        std::lock_guard<std::mutex> lock(mutex_);
        err_.append(buffer, static_cast<size_t>(n));
      }
      ::close(fd);
    });
  }

  ~ServeProcess() {
    if (pid_ > 0 && exit_status_ < 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (reader_.joinable()) reader_.join();
  }

  // The port from "listening on http://127.0.0.1:PORT", or 0 after 60 s.
  int wait_for_port() {
    const std::regex listening(R"(listening on http://127\.0\.0\.1:(\d+))");
    for (int i = 0; i < 6000; ++i) {
      {
        std::lock_guard<std::mutex> lock(mutex_);
        std::smatch match;
        if (std::regex_search(err_, match, listening)) return std::stoi(match[1]);
      }
      if (exited()) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return 0;
  }

  // Sends `signo` and returns the exit code (-1: killed by a signal or hung).
  int stop(int signo) {
    ::kill(pid_, signo);
    for (int i = 0; i < 3000 && !exited(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (reader_.joinable()) reader_.join();
    return exit_status_ >= 0 && WIFEXITED(exit_status_) ? WEXITSTATUS(exit_status_) : -1;
  }

  std::string err() {
    std::lock_guard<std::mutex> lock(mutex_);
    return err_;
  }

 private:
  bool exited() {
    if (exit_status_ >= 0) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) exit_status_ = status;
    return exit_status_ >= 0;
  }

  pid_t pid_ = -1;
  int exit_status_ = -1;
  std::thread reader_;
  std::mutex mutex_;
  std::string err_;
};

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
  EXPECT_NE(server.err().find("SIGTERM received, shutting down"), std::string::npos);
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
