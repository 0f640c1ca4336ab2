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
#include "cli_test_util.h"
#include "test_util.h"

namespace specstack {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::ServeProcess;

// Scratch folders of these tests.
struct TempDir : testing::TempDir {
  TempDir() : testing::TempDir("specstack_sp_") {}
};

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
  expect_clean_error(run_serve_to_exit(base + "--draft-quantization fp8"),
                     "--draft-quantization fp8 needs --device cuda");
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
  ServeProcess server({"--model", tinystories(), "--draft", tinystories(), "--specprefill",
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
  ServeProcess no_tokenizer({"--model", tinystories(), "--draft", draft.string()});
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
  ServeProcess dummy({"--dummy-weights", "--config", config, "--tokenizer", tinystories(),
                      "--draft-config", config, "--specprefill"});
  ASSERT_GT(dummy.wait_for_port(), 0) << dummy.err();
  EXPECT_NE(dummy.err().find("specstack: draft '" + config + " (dummy weights)'"),
            std::string::npos)
      << dummy.err();
  EXPECT_EQ(dummy.stop(), 0) << dummy.err();
}

}  // namespace
}  // namespace specstack
