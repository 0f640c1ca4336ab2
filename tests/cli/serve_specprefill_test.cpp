// specstack serve with a draft: flag validation (one clear error line, exit
// 1, before anything loads), the startup vocabulary check against the
// target's tokenizer, and a served TinyStories target + draft whose usage
// carries `specprefill` and whose /metrics expose the SpecPrefill counters.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <nlohmann/json.hpp>
#include <regex>
#include <thread>

#include "base/check.h"
#include "base/mapped_file.h"
#include "test_util.h"

namespace specstack {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct ServeRun {
  int exit_code = -1;  // -1: killed by a signal (a crash)
  std::string err;
};

// `specstack serve ARGS` expected to exit on its own (a startup error).
ServeRun run_serve_to_exit(const std::string& args) {
  const fs::path err_file =
      fs::temp_directory_path() / ("specstack_sp_err_" + std::to_string(::getpid()));
  const std::string command =
      testing::specstack_binary() + " serve --port 0 " + args + " 2>" + err_file.string();
  ServeRun result;
  const int status = std::system(command.c_str());
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  result.err = read_text_file(err_file.string()).value();
  fs::remove(err_file);
  return result;
}

// One error line, exit code 1, and the message contains `needle`.
void expect_clean_error(const ServeRun& r, const std::string& needle) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.err.rfind("specstack: error: ", 0), 0u) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << "expected '" << needle << "' in: " << r.err;
}

// A `specstack serve --port 0` child whose stderr is collected.
class ServeChild {
 public:
  explicit ServeChild(const std::vector<std::string>& extra_args) {
    int fds[2];
    SS_CHECK(::pipe(fds) == 0);
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

  ~ServeChild() {
    if (pid_ > 0 && status_ < 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (reader_.joinable()) reader_.join();
  }

  // The port it listens on, or 0 if it exited or 60 s passed.
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

  // SIGTERM; the exit code (-1: killed by a signal or hung).
  int stop() {
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < 3000 && !exited(); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (reader_.joinable()) reader_.join();
    return status_ >= 0 && WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
  }

  std::string err() {
    std::lock_guard<std::mutex> lock(mutex_);
    return err_;
  }

 private:
  bool exited() {
    if (status_ >= 0) return true;
    int status = 0;
    if (::waitpid(pid_, &status, WNOHANG) == pid_) status_ = status;
    return status_ >= 0;
  }

  pid_t pid_ = -1;
  int status_ = -1;
  std::thread reader_;
  std::mutex mutex_;
  std::string err_;
};

class TempDir {
 public:
  TempDir() {
    path_ = fs::temp_directory_path() /
            ("specstack_sp_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};

std::string tinystories() {
  return testing::golden_model_dir("tinystories-656k");
}

// A TinyStories folder with the given files (each copied from TinyStories).
fs::path tinystories_copy(const TempDir& dir, const std::vector<std::string>& files) {
  for (const std::string& f : files) fs::copy_file(tinystories() + "/" + f, dir.path() / f);
  return dir.path();
}

TEST(CliServeSpecPrefill, SpecPrefillWithoutADraftIsOneClearError) {
  const ServeRun r = run_serve_to_exit("--model " + tinystories() + " --specprefill");
  expect_clean_error(r, "--specprefill needs a draft model: give --draft DIR");
}

TEST(CliServeSpecPrefill, OutOfRangeSettingsAreOneClearError) {
  const std::string base =
      "--model " + tinystories() + " --draft " + tinystories() + " --specprefill ";
  expect_clean_error(run_serve_to_exit(base + "--specprefill-keep-pct 0"),
                     "--specprefill-keep-pct must be in (0, 1], got 0");
  expect_clean_error(run_serve_to_exit(base + "--specprefill-keep-pct 1.5"),
                     "--specprefill-keep-pct must be in (0, 1], got 1.5");
  expect_clean_error(run_serve_to_exit(base + "--specprefill-lookahead 0"),
                     "--specprefill-lookahead must be >= 1, got 0");
  expect_clean_error(run_serve_to_exit(base + "--specprefill-chunk 0"),
                     "--specprefill-chunk must be >= 1, got 0");
  expect_clean_error(run_serve_to_exit(base + "--specprefill-pool 12"),
                     "--specprefill-pool must be an odd number >= 1, got 12");
  expect_clean_error(run_serve_to_exit(base + "--specprefill-pool -1"),
                     "--specprefill-pool must be an odd number >= 1, got -1");
  expect_clean_error(run_serve_to_exit(base + "--specprefill-threshold -5"),
                     "--specprefill-threshold must be >= 0, got -5");
  expect_clean_error(run_serve_to_exit("--model " + tinystories() + " --draft-config " +
                                       tinystories() + "/config.json"),
                     "--draft-config is only used with --dummy-weights");
}

TEST(CliServeSpecPrefill, DraftWithAnotherTokenizerIsRejectedNamingTheId) {
  TempDir dir;
  const fs::path draft = tinystories_copy(dir, {"config.json", "model.safetensors"});
  fs::copy_file(testing::test_data("golden/tokenizers/mistral-v0.1/tokenizer.json"),
                draft / "tokenizer.json");
  const ServeRun r = run_serve_to_exit("--model " + tinystories() + " --draft " + draft.string() +
                                       " --specprefill");
  expect_clean_error(r, "its tokenizer differs from the target's");
  EXPECT_NE(r.err.find(R"(id 1 differs: "<|start_story|>" vs "<s>")"), std::string::npos) << r.err;
}

TEST(CliServeSpecPrefill, DummyDraftWithAnotherVocabSizeIsRejected) {
  const ServeRun r = run_serve_to_exit(
      "--dummy-weights --config " + tinystories() + "/config.json --tokenizer " + tinystories() +
      " --draft-config " + testing::golden_model_dir("llama-gqa") + "/config.json --specprefill");
  expect_clean_error(r, "the draft's vocab_size (512) is far from the target's (2048)");
}

TEST(CliServeSpecPrefill, ServesWithADraftAndReportsIt) {
  ServeChild server({"--model", tinystories(), "--draft", tinystories(), "--specprefill",
                     "--specprefill-threshold", "16", "--specprefill-keep-pct", "0.5",
                     "--draft-kv-blocks", "64", "--served-model-name", "tiny"});
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0) << server.err();
  const std::string startup = server.err();
  EXPECT_NE(startup.find("specstack: draft '" + tinystories() + "': llama, 2 layers"),
            std::string::npos)
      << startup;
  EXPECT_NE(startup.find("KV cache 64 blocks"), std::string::npos) << startup;
  EXPECT_NE(startup.find("speculative prefill on for prompts of >= 16 uncached tokens: keep 50%, "
                         "lookahead 8, chunk 32, pool 13"),
            std::string::npos)
      << startup;
  // The vocabulary check passed, and 64 blocks hold the whole context.
  EXPECT_EQ(startup.find("tokenizer.json"), std::string::npos) << startup;
  EXPECT_EQ(startup.find("draft's KV cache holds"), std::string::npos) << startup;

  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  auto res = cli.Post("/v1/completions",
                      json({{"prompt", "Once upon a time"},
                            {"max_tokens", 4},
                            {"temperature", 0},
                            {"extra_body", {{"specprefill", true}}}})
                          .dump(),
                      "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json specprefill = json::parse(res->body)["usage"]["specprefill"];
  ASSERT_TRUE(specprefill.is_object()) << res->body;
  // Forced on by the request although the prompt is under the threshold.
  EXPECT_EQ(specprefill["applied"], true) << res->body;
  EXPECT_EQ(specprefill["prompt_tokens"], json::parse(res->body)["usage"]["prompt_tokens"]);
  EXPECT_GE(specprefill["kept_tokens"].get<int64_t>(), 1);
  EXPECT_LE(specprefill["kept_tokens"], specprefill["prompt_tokens"]);
  EXPECT_TRUE(specprefill["scoring_ms"].is_number());
  EXPECT_TRUE(specprefill["fallback_reason"].is_null()) << res->body;

  auto metrics = cli.Get("/metrics");
  ASSERT_TRUE(metrics);
  for (const char* name :
       {"specstack_specprefill_applied_total", "specstack_specprefill_fallback_total",
        "specstack_specprefill_tokens_saved_total"}) {
    EXPECT_NE(metrics->body.find(std::string("# TYPE ") + name + " counter"), std::string::npos)
        << name;
  }
  EXPECT_NE(metrics->body.find("\nspecstack_specprefill_applied_total 1\n"), std::string::npos)
      << metrics->body;
  EXPECT_EQ(server.stop(), 0) << server.err();
}

TEST(CliServeSpecPrefill, DraftWithoutATokenizerWarnsAndDummyDraftsStart) {
  TempDir dir;
  const fs::path draft = tinystories_copy(dir, {"config.json", "model.safetensors"});
  ServeChild no_tokenizer({"--model", tinystories(), "--draft", draft.string()});
  ASSERT_GT(no_tokenizer.wait_for_port(), 0) << no_tokenizer.err();
  const std::string startup = no_tokenizer.err();
  EXPECT_NE(startup.find("warning: --draft " + draft.string() + " has no tokenizer.json"),
            std::string::npos)
      << startup;
  // Without --specprefill the draft only serves requests that ask for it.
  EXPECT_NE(startup.find("speculative prefill only for requests with \"specprefill\": true"),
            std::string::npos)
      << startup;
  EXPECT_EQ(no_tokenizer.stop(), 0) << no_tokenizer.err();

  const std::string config = tinystories() + "/config.json";
  ServeChild dummy({"--dummy-weights", "--config", config, "--tokenizer", tinystories(),
                    "--draft-config", config, "--specprefill"});
  ASSERT_GT(dummy.wait_for_port(), 0) << dummy.err();
  EXPECT_NE(dummy.err().find("specstack: draft '" + config + " (dummy weights)'"),
            std::string::npos)
      << dummy.err();
  EXPECT_EQ(dummy.stop(), 0) << dummy.err();
}

}  // namespace
}  // namespace specstack
