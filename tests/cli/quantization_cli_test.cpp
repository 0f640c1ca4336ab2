// --quantization through the binary: a safetensors model runs quantized, and
// the flag gives one clear line where it does not apply (CUDA, GGUF files,
// an unknown format).
#include <gtest/gtest.h>

#include <algorithm>

#include "cli_test_util.h"
#include "test_util.h"

namespace specstack {
namespace {

using testing::CommandResult;

using testing::expect_clean_error;

TEST(CliQuantization, TinyStoriesGreedyTextStartsAsF32) {
  // TinyStories' rows are 128 and 384 long: --quantization q4_k falls back to
  // Q8_0 for every layer matrix, and says so in one note line. The greedy
  // text matches the f32 model's up to " small house", where llama.cpp's own
  // Q8_0 GGUF of this model diverges too (tests/cli/gguf_cli_test.cpp).
  const std::string base = "generate --model " + testing::golden_model_dir("tinystories-656k") +
                           " --prompt 'Once upon a time' -n 12 --threads 2";
  for (const char* q : {"q8_0", "q4_k"}) {
    SCOPED_TRACE(q);
    const CommandResult r = testing::run_specstack(base + " --quantization " + q);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.rfind(", a little girl named Lily lived in a small house", 0), 0u) << r.out;
    const bool note = r.err.find("are Q8_0 instead of Q4_K") != std::string::npos;
    EXPECT_EQ(note, std::string(q) == "q4_k") << r.err;
  }
}

TEST(CliQuantization, ErrorsWhereTheFlagDoesNotApply) {
  const std::string model = testing::golden_model_dir("tinystories-656k");
  expect_clean_error(testing::run_specstack("generate --model " + model +
                                            " --prompt hi --device cuda --quantization q8_0"),
                     "--quantization");
  expect_clean_error(testing::run_specstack("generate --model " +
                                            testing::test_data("gguf/tinystories-656k.q8_0.gguf") +
                                            " --prompt hi --quantization q4_k"),
                     "GGUF");
  // fp8 is the CUDA backend's (e4m3 GEMMs); on the CPU it is refused by name.
  expect_clean_error(
      testing::run_specstack("generate --model " + model + " --prompt hi --quantization fp8"),
      "--device cuda");
  const CommandResult bad =
      testing::run_specstack("generate --model " + model + " --prompt hi --quantization q3_k");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("--quantization"), std::string::npos) << bad.err;
}

TEST(CliQuantization, DraftQuantizationIsTheDraftsOwnAndCudaOnly) {
  // --draft-quantization fp8 loads the draft's linear layers as e4m3 (CUDA,
  // Hopper); on the CPU every command with a draft refuses it by name, and a
  // CPU format is no draft format.
  const std::string model = testing::golden_model_dir("tinystories-656k");
  const std::string with_draft = " --model " + model + " --draft " + model;
  for (const std::string& command :
       {"generate" + with_draft + " --prompt hi --specprefill",
        "bench ttft --dummy-weights --config " + model + "/config.json --draft-config " + model +
            "/config.json --lengths 64",
        "eval needle" + with_draft + " --n 1 --context 64", "eval spec" + with_draft + " --n 1"}) {
    SCOPED_TRACE(command);
    expect_clean_error(testing::run_specstack(command + " --draft-quantization fp8"),
                       "--draft-quantization fp8 needs --device cuda");
    const CommandResult cpu_format = testing::run_specstack(command + " --draft-quantization q8_0");
    EXPECT_NE(cpu_format.exit_code, 0);
    EXPECT_NE(cpu_format.err.find("--draft-quantization"), std::string::npos) << cpu_format.err;
  }
  // "none" is the default spelled out: the draft runs as stored.
  const CommandResult none =
      testing::run_specstack("generate" + with_draft +
                             " --prompt 'Once upon a time' -n 4 --threads 2 --specprefill "
                             "--draft-quantization none");
  EXPECT_EQ(none.exit_code, 0) << none.err;
}

}  // namespace
}  // namespace specstack
