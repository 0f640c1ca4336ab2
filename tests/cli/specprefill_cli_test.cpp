// End-to-end tests of speculative prefill from the command line: `generate
// --draft` (keep 1.0 reproduces plain generation, keep 0.5 is applied and
// reported, bad flags give one clear error line) and `bench ttft` on tiny
// golden models (a table with a speedup column and the CSV).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>

#include "base/check.h"
#include "base/mapped_file.h"
#include "cli_test_util.h"
#include "test_util.h"

namespace specstack {
namespace {

namespace fs = std::filesystem;

using testing::CommandResult;

CommandResult run(const std::string& args) {
  return testing::run_specstack(args);
}

using testing::expect_clean_error;

const std::string kPrompt =
    "'Once upon a time, there was a little girl named Lily. She loved to play outside in the sun. "
    "One day, she saw a big red ball in the park. She ran to it and'";

std::string tinystories() {
  return testing::golden_model_dir("tinystories-656k");
}

TEST(CliGenerateDraft, KeepAllEqualsPlainGeneration) {
  const std::string base =
      "generate --model " + tinystories() + " --prompt " + kPrompt + " -n 24 --threads 2";
  CommandResult plain = run(base);
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  CommandResult spec =
      run(base + " --draft " + tinystories() + " --specprefill --specprefill-keep-pct 1.0");
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  EXPECT_FALSE(plain.out.empty());
  EXPECT_EQ(spec.out, plain.out);
  EXPECT_NE(spec.err.find("specprefill: applied yes"), std::string::npos) << spec.err;
  EXPECT_NE(spec.err.find("tok/s"), std::string::npos) << spec.err;
}

TEST(CliGenerateDraft, HalfKeepIsAppliedAndReported) {
  CommandResult r = run("generate --model " + tinystories() + " --prompt " + kPrompt +
                        " -n 8 --ignore-eos --draft " + tinystories() +
                        " --specprefill --specprefill-keep-pct 0.5 --specprefill-chunk 4");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  std::smatch m;
  ASSERT_TRUE(
      std::regex_search(r.err, m, std::regex("applied yes, kept (\\d+) of (\\d+) prompt tokens")))
      << r.err;
  const int kept = std::stoi(m[1]), total = std::stoi(m[2]);
  EXPECT_GT(total, 16);
  EXPECT_LT(kept, total);
  EXPECT_GT(kept, 0);
  EXPECT_NE(r.err.find("generation 8 tokens"), std::string::npos) << r.err;
}

TEST(CliGenerateDraft, BelowTheThresholdWithoutSpecprefillIsNotApplied) {
  CommandResult r = run("generate --model " + tinystories() +
                        " --prompt 'Once upon a time' -n 4 --draft " + tinystories());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("specprefill: not applied"), std::string::npos) << r.err;
}

TEST(CliGenerateDraft, BadFlagsGiveOneClearLine) {
  const std::string base = "generate --model " + tinystories() + " --prompt hi ";
  const std::string draft = "--draft " + tinystories() + " ";
  expect_clean_error(run(base + "--specprefill"), "--specprefill needs a draft");
  expect_clean_error(run(base + draft + "--specprefill-keep-pct 0"), "--specprefill-keep-pct");
  expect_clean_error(run(base + draft + "--specprefill-keep-pct 1.5"), "--specprefill-keep-pct");
  expect_clean_error(run(base + draft + "--specprefill-lookahead 0"), "--specprefill-lookahead");
  expect_clean_error(run(base + draft + "--specprefill-chunk 0"), "--specprefill-chunk");
  expect_clean_error(run(base + draft + "--specprefill-pool 4"), "--specprefill-pool");
  expect_clean_error(run(base + "--draft " + testing::golden_model_dir("llama-gqa")),
                     "vocab_size (512)");
  expect_clean_error(run(base + "--draft /nonexistent/draft"), "/nonexistent/draft");
}

TEST(CliBenchTtft, RunsEndToEndAndPrintsASpeedupTable) {
  const fs::path dir =
      fs::temp_directory_path() / ("specstack_bench_ttft_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string model = testing::golden_model_dir("llama-gqa");
  CommandResult r =
      run("bench ttft --model " + model + " --draft " + model +
          " --lengths 64,128 --keep 0.5,1.0 --specprefill-chunk 8 --repeats 1 --threads 2 --out " +
          (dir / "t").string());
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("| length | keep | TTFT full s | TTFT spec s | speedup |"),
            std::string::npos)
      << r.out;
  // One row per (length, keep), with k_actual 1 for keep 1.0.
  std::smatch m;
  std::string rest = r.out;
  std::vector<std::string> rows;
  const std::regex row(
      "\\| (\\d+) \\| ([0-9.]+) \\| [0-9.]+ \\| [0-9.]+ \\| [0-9.]+x \\| [-0-9.]+ \\| ([0-9.]+) "
      "\\|");
  while (std::regex_search(rest, m, row)) {
    rows.push_back(m[1].str() + "/" + m[2].str());
    if (m[2] == "1") {
      EXPECT_EQ(m[3], "1.000");
    } else {
      EXPECT_LT(std::stod(m[3]), 1.0);
    }
    rest = m.suffix();
  }
  EXPECT_EQ(rows, (std::vector<std::string>{"64/0.5", "64/1", "128/0.5", "128/1"})) << r.out;
  const std::string csv = read_text_file((dir / "t.csv").string()).value();
  EXPECT_EQ(std::count(csv.begin(), csv.end(), '\n'), 5) << csv;
  EXPECT_EQ(csv.rfind("length,keep,k_actual,", 0), 0u) << csv;
  fs::remove_all(dir);
}

TEST(CliBenchTtft, BadFlagsGiveOneClearLine) {
  const std::string model = testing::golden_model_dir("llama-gqa");
  expect_clean_error(run("bench ttft --model " + model + " --lengths 64"), "--draft");
  expect_clean_error(run("bench ttft --model " + model + " --draft " + model + " --keep 0.5,1.5"),
                     "--keep");
  expect_clean_error(
      run("bench ttft --model " + model + " --draft " + model + " --lengths 64,100000"), "context");
  expect_clean_error(
      run("bench ttft --model " + model + " --draft " + tinystories() + " --lengths 64"),
      "vocab_size");
}

}  // namespace
}  // namespace specstack
