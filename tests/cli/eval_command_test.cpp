// `specstack eval needle|json|ppl` run end to end on the small TinyStories
// model (short context): they must work on any model folder pair.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>

#include "test_util.h"

namespace specstack {
namespace {

struct Output {
  int exit_code = -1;
  std::string text;  // stdout then stderr
};

Output run(const std::string& args) {
  testing::CommandResult result = testing::run_specstack(args);
  return {result.exit_code, result.out + result.err};
}

std::string model_args() {
  const std::string model = testing::golden_model_dir("tinystories-656k");
  return "--model " + model + " --draft " + model + " --filler-model " + model + " --threads 2";
}

TEST(CliEval, NeedleRunsAndReportsFullVersusSparseSideBySide) {
  Output out =
      run("eval needle " + model_args() + " --context 256 --n 2 --depths 0.1,0.9 --keep 0.5,1.0");
  ASSERT_EQ(out.exit_code, 0) << out.text;
  EXPECT_NE(out.text.find("| depth 10% | 2 |"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("| depth 90% | 2 |"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("keep 0.50"), std::string::npos);
  // keep 1.0 with draft = target must agree with full prefill exactly: no regression from it.
  EXPECT_NE(out.text.find("keep 1.00 -> 1.000"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("regressions against full prefill:"), std::string::npos);
}

TEST(CliEval, JsonAndPerplexityRun) {
  Output json =
      run("eval json " + model_args() +
          " --context 200 --n 2 --keep 0.5 --quantization q8_0 --draft-quantization none");
  ASSERT_EQ(json.exit_code, 0) << json.text;
  EXPECT_NE(json.text.find("| json | 2 |"), std::string::npos) << json.text;
  // The header names each model's weight format: a quality result depends on them.
  EXPECT_NE(json.text.find(" (q8_0), draft "), std::string::npos) << json.text;
  EXPECT_NE(json.text.find(" (as stored), context 200"), std::string::npos) << json.text;
  Output ppl = run("eval ppl " + model_args() + " --context 300 --n 2 --keep 0.5,1.0");
  ASSERT_EQ(ppl.exit_code, 0) << ppl.text;
  EXPECT_NE(ppl.text.find("| full |"), std::string::npos) << ppl.text;
  EXPECT_NE(ppl.text.find("| keep 0.50 |"), std::string::npos) << ppl.text;
}

TEST(CliEval, RejectsBadKeepAndMissingDraft) {
  Output bad = run("eval needle " + model_args() + " --keep 1.5");
  EXPECT_EQ(bad.exit_code, 1);
  EXPECT_NE(bad.text.find("--keep must be in (0, 1]"), std::string::npos) << bad.text;
}

}  // namespace
}  // namespace specstack
