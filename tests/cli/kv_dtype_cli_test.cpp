// --kv-dtype through the binary: a bf16 / f16 KV cache on the CPU gives the
// f32 cache's greedy text on tinystories, and the flag gives one clear line
// where it does not apply (--device cuda holds bf16 only).
#include <gtest/gtest.h>

#include <algorithm>

#include "cli_test_util.h"
#include "test_util.h"

namespace specstack {
namespace {

using testing::CommandResult;

TEST(CliKvDtype, TinyStoriesGreedyTextEqualsTheF32Cache) {
  const std::string base = "generate --model " + testing::golden_model_dir("tinystories-656k") +
                           " --prompt 'Once upon a time' -n 16 --threads 2";
  const CommandResult f32 = testing::run_specstack(base);
  ASSERT_EQ(f32.exit_code, 0) << f32.err;
  for (const char* dtype : {"bf16", "f16"}) {
    SCOPED_TRACE(dtype);
    const CommandResult r = testing::run_specstack(base + " --kv-dtype " + dtype);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out, f32.out);
  }
}

TEST(CliKvDtype, CudaTakesBf16OnlyAndUnknownTypesAreRejected) {
  const std::string base = "generate --model " + testing::golden_model_dir("tinystories-656k") +
                           " --prompt hi --device cuda --kv-dtype ";
  for (const char* dtype : {"f32", "f16"}) {
    const CommandResult r = testing::run_specstack(base + dtype);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err.rfind("specstack: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find("the CUDA KV cache is bf16"), std::string::npos) << r.err;
  }
  const CommandResult bad =
      testing::run_specstack("generate --model " + testing::golden_model_dir("tinystories-656k") +
                             " --prompt hi --kv-dtype q8_0");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--kv-dtype"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace specstack
