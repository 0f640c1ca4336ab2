// Speculative decoding from the command line: the --spec-* flags of generate
// and serve (one clear error line, exit 1, before anything loads), serve's
// startup line and draft KV sizing with --spec-decode, usage.speculative on a
// served TinyStories target + draft, and generate --spec-decode (greedy output
// identical to plain generation, one stats line).
#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <regex>

#include "cli_test_util.h"
#include "test_util.h"

namespace specstack {
namespace {

using nlohmann::json;
using testing::CommandResult;
using testing::ServeProcess;

CommandResult run(const std::string& args) {
  return testing::run_specstack(args);
}

using testing::expect_clean_error;

std::string tinystories() {
  return testing::golden_model_dir("tinystories-656k");
}

// The same checks on both commands: the flags and their validation are shared.
void expect_flag_errors(const std::string& base) {
  const std::string draft = "--draft " + tinystories() + " ";
  expect_clean_error(run(base + "--spec-decode"),
                     "--spec-decode needs a draft model: give --draft DIR");
  expect_clean_error(run(base + draft + "--spec-tokens 4"), "--spec-tokens needs --spec-decode");
  expect_clean_error(run(base + draft + "--spec-fixed-k"), "--spec-fixed-k needs --spec-decode");
  expect_clean_error(run(base + draft + "--spec-draft-window 64"),
                     "--spec-draft-window needs --spec-decode");
  const std::string on = base + draft + "--spec-decode ";
  expect_clean_error(run(on + "--spec-tokens 0"), "--spec-tokens must be in [1, 16], got 0");
  expect_clean_error(run(on + "--spec-tokens 17"), "--spec-tokens must be in [1, 16], got 17");
  expect_clean_error(run(on + "--spec-draft-sink 4"),
                     "--spec-draft-sink needs --spec-draft-window");
  expect_clean_error(run(on + "--spec-draft-window 0"), "--spec-draft-window must be >= 1, got 0");
  expect_clean_error(run(on + "--spec-draft-window 64 --spec-draft-sink -1"),
                     "--spec-draft-sink must be >= 0, got -1");
}

TEST(CliSpecDecode, GenerateFlagErrorsAreOneClearLine) {
  expect_flag_errors("generate --model " + tinystories() + " --prompt hi ");
}

TEST(CliSpecDecode, ServeFlagErrorsAreOneClearLine) {
  expect_flag_errors("serve --port 0 --model " + tinystories() + " ");
}

TEST(CliSpecDecode, GenerateGreedyEqualsPlainAndReportsTheStats) {
  const std::string base = "generate --model " + tinystories() +
                           " --prompt 'Once upon a time, there was a little girl' -n 24 "
                           "--ignore-eos --threads 2";
  CommandResult plain = run(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  CommandResult spec = run(base + " --draft " + tinystories() + " --spec-decode --spec-tokens 3");
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  EXPECT_FALSE(plain.out.empty());
  EXPECT_EQ(spec.out, plain.out);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      spec.err, m,
      std::regex("specstack: speculative decoding: drafted (\\d+), accepted (\\d+) \\(acceptance "
                 "([0-9.]+)\\), mean accepted length ([0-9.]+) per verification\n")))
      << spec.err;
  EXPECT_LE(std::stoll(m[2]), std::stoll(m[1]));
  EXPECT_LE(std::stod(m[3]), 1.0);
  EXPECT_LE(std::stod(m[4]), 3.0);
  // A decoding-only run says nothing about speculative prefill it never asked for.
  EXPECT_EQ(spec.err.find("specprefill: not applied"), std::string::npos) << spec.err;
  EXPECT_NE(spec.err.find("generation 24 tokens"), std::string::npos) << spec.err;
}

TEST(CliSpecDecode, ServeSizesTheDraftAndReportsUsage) {
  // 100 target blocks, 4 sequences: the draft holds the target's 100 blocks
  // plus one block a sequence for its proposals.
  ServeProcess server({"--model", tinystories(), "--draft", tinystories(), "--spec-decode",
                       "--spec-tokens", "3", "--spec-draft-window", "64", "--spec-draft-sink", "4",
                       "--kv-blocks", "100", "--max-num-seqs", "4"});
  const int port = server.wait_for_port();
  ASSERT_GT(port, 0) << server.err();
  const std::string startup = server.err();
  EXPECT_NE(startup.find("KV cache 104 blocks"), std::string::npos) << startup;
  EXPECT_NE(startup.find("specstack: speculative decoding on: K 3 draft tokens per step "
                         "(adaptive), sparse draft KV (window 64 + sink 4); requests opt out "
                         "with \"speculative_decoding\": false\n"),
            std::string::npos)
      << startup;

  httplib::Client cli("127.0.0.1", port);
  cli.set_read_timeout(60, 0);
  auto res =
      cli.Post("/v1/completions",
               json({{"prompt", "Once upon a time"}, {"max_tokens", 8}, {"temperature", 0}}).dump(),
               "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200) << res->body;
  const json usage = json::parse(res->body)["usage"];
  ASSERT_TRUE(usage["speculative"].is_object()) << res->body;
  EXPECT_LE(usage["speculative"]["accepted_tokens"].get<int64_t>(),
            usage["speculative"]["draft_tokens"].get<int64_t>());
  EXPECT_TRUE(usage["speculative"]["acceptance_rate"].is_number()) << res->body;
  EXPECT_TRUE(usage["specprefill"].is_object()) << res->body;

  auto metrics = cli.Get("/metrics");
  ASSERT_TRUE(metrics);
  EXPECT_NE(metrics->body.find("# TYPE specstack_spec_decode_accepted_length histogram"),
            std::string::npos);
  EXPECT_EQ(server.stop(), 0) << server.err();
}

TEST(CliSpecDecode, ServeWarnsWhenAnExplicitDraftPoolIsSmallerThanTheTargets) {
  ServeProcess server({"--model", tinystories(), "--draft", tinystories(), "--spec-decode",
                       "--kv-blocks", "100", "--draft-kv-blocks", "40"});
  ASSERT_GT(server.wait_for_port(), 0) << server.err();
  EXPECT_NE(server.err().find("warning: the draft's KV cache holds 640 tokens, fewer than the "
                              "target's 1600"),
            std::string::npos)
      << server.err();
  EXPECT_NE(server.err().find("speculative decoding on: K 4 draft tokens per step (adaptive), "
                              "dense draft KV"),
            std::string::npos)
      << server.err();
  EXPECT_EQ(server.stop(), 0) << server.err();
}

}  // namespace
}  // namespace specstack
