// --tensor-parallel-size through the binary: the greedy text of TinyStories is
// the same at N = 1, 2 and 8 (CPU thread ranks), and the flag gives one clear
// line where it does not apply (heads it does not divide, CUDA, GGUF files).
#include <gtest/gtest.h>

#include <algorithm>

#include "cli_test_util.h"
#include "test_util.h"

namespace specstack {
namespace {

using testing::CommandResult;

using testing::expect_clean_error;

TEST(CliTensorParallel, TinyStoriesGreedyTextEqualsOneRank) {
  const std::string base = "generate --model " + testing::golden_model_dir("tinystories-656k") +
                           " --prompt 'Once upon a time' -n 24 --threads 2";
  const CommandResult one = testing::run_specstack(base);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  EXPECT_EQ(one.out.rfind(", a little girl named Lily", 0), 0u) << one.out;
  for (const char* n : {"2", "8"}) {
    SCOPED_TRACE(n);
    const CommandResult r = testing::run_specstack(base + " --tensor-parallel-size " + n);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, one.out);
  }
}

TEST(CliTensorParallel, ErrorsWhereTheFlagDoesNotApply) {
  const std::string model = testing::golden_model_dir("tinystories-656k");
  expect_clean_error(
      testing::run_specstack("generate --model " + model + " --prompt hi --tensor-parallel-size 3"),
      "--tensor-parallel-size 3: it does not divide the 8 attention heads");
  expect_clean_error(testing::run_specstack("generate --model " + model +
                                            " --prompt hi --device cuda --tensor-parallel-size 2"),
                     "tensor parallelism on CUDA needs NCCL rank models: not built yet (issue 13)");
  expect_clean_error(testing::run_specstack("generate --model " +
                                            testing::test_data("gguf/tinystories-656k.q8_0.gguf") +
                                            " --prompt hi --tensor-parallel-size 2"),
                     "GGUF files are not split yet");
}

}  // namespace
}  // namespace specstack
