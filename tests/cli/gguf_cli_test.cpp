// `--model FILE.gguf` through the binary: generate and logits run a GGUF file
// like a folder (and as a draft), and damaged GGUF files give one clear line.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "cli_test_util.h"
#include "test_util.h"

namespace specstack {
namespace {

namespace fs = std::filesystem;
using testing::CommandResult;

std::string tinystories_gguf() {
  return testing::test_data("gguf/tinystories-656k.q8_0.gguf");
}

using testing::expect_clean_error;

TEST(CliGguf, GenerateRunsAGgufFileWithItsTokenizer) {
  // Q8_0 TinyStories: greedy text starts as the f32 model's does (the first
  // divergence, after " small house", is the 8-bit weights').
  CommandResult r = testing::run_specstack("generate --model " + tinystories_gguf() +
                                           " --prompt 'Once upon a time' -n 12 --threads 2");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind(", a little girl named Lily lived in a small house", 0), 0u) << r.out;
  // The start-up log names the int8 kernels the file runs on.
  EXPECT_NE(r.err.find("specstack: CPU int8 kernels "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" weight rows per pass, Q8_0 panels "), std::string::npos) << r.err;
}

TEST(CliGguf, AGgufDraftDecodesLikeTheTargetAlone) {
  const std::string base = "generate --model " + testing::golden_model_dir("tinystories-656k") +
                           " --prompt 'Once upon a time' -n 24 --threads 2";
  CommandResult plain = testing::run_specstack(base);
  CommandResult spec =
      testing::run_specstack(base + " --draft " + tinystories_gguf() + " --spec-decode");
  ASSERT_EQ(plain.exit_code, 0) << plain.err;
  ASSERT_EQ(spec.exit_code, 0) << spec.err;
  EXPECT_EQ(spec.out, plain.out);
  EXPECT_NE(spec.err.find("speculative decoding"), std::string::npos) << spec.err;
}

TEST(CliGguf, DamagedGgufFilesGiveOneClearLine) {
  testing::TempDir dir("specstack_gguf_cli_");
  std::ifstream in(tinystories_gguf(), std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  struct Damage {
    std::string name;
    std::string bytes;
    std::string needle;
  };
  std::string bad_arch = bytes;
  const size_t at = bad_arch.find("llama");  // general.architecture's value
  ASSERT_NE(at, std::string::npos);
  bad_arch.replace(at, 5, "gemma");
  const std::vector<Damage> cases = {
      {"truncated", bytes.substr(0, bytes.size() / 2), "runs past the end of the file"},
      {"header_cut", bytes.substr(0, 40), "does not fit in the file"},
      {"architecture", bad_arch, "unsupported architecture 'gemma'"},
  };
  for (const Damage& d : cases) {
    SCOPED_TRACE(d.name);
    const fs::path path = dir.path() / (d.name + ".gguf");
    std::ofstream(path, std::ios::binary) << d.bytes;
    expect_clean_error(testing::run_specstack("generate --model " + path.string() +
                                              " --prompt 'Once upon a time' -n 4"),
                       d.needle);
  }
}

}  // namespace
}  // namespace specstack
