// Replays the fuzz seed corpora (tests/fuzz/corpus) through the parsers in
// the ordinary test build, so they are exercised without clang/libFuzzer.
// Naming rule of the seeds: "bad_*" must be rejected, every other file parsed.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "gguf/gguf_file.h"
#include "model/config.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace specstack {
namespace {

namespace fs = std::filesystem;

std::vector<std::string> corpus_files(const std::string& name) {
  std::string dir = specstack::testing::test_data("../fuzz/corpus/" + name);
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.is_regular_file()) files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

bool expected_bad(const std::string& path) {
  return fs::path(path).filename().string().rfind("bad_", 0) == 0;
}

template <typename Parse>
void replay(const std::string& corpus, Parse parse) {
  std::vector<std::string> files = corpus_files(corpus);
  ASSERT_GE(files.size(), 3u) << corpus;
  int n_good = 0, n_bad = 0;
  for (const std::string& path : files) {
    Result<std::string> bytes = read_text_file(path);
    ASSERT_TRUE(bytes.ok()) << bytes.message();
    std::string error = parse(bytes.value());
    if (expected_bad(path)) {
      ++n_bad;
      EXPECT_FALSE(error.empty()) << path << " was accepted";
    } else {
      ++n_good;
      EXPECT_TRUE(error.empty()) << path << ": " << error;
    }
  }
  EXPECT_GT(n_good, 0) << corpus;
  EXPECT_GT(n_bad, 0) << corpus;
}

TEST(FuzzCorpusTest, GgufHeader) {
  replay("gguf_header", [](const std::string& bytes) {
    Result<gguf::Header> header = gguf::parse_gguf(bytes);
    return header.ok() ? std::string() : header.message();
  });
}

TEST(FuzzCorpusTest, SafetensorsHeader) {
  replay("safetensors_header", [](const std::string& bytes) {
    Result<SafetensorsHeader> header = parse_safetensors_header(bytes);
    return header.ok() ? std::string() : header.message();
  });
}

TEST(FuzzCorpusTest, ConfigJson) {
  replay("config_json", [](const std::string& bytes) {
    Result<ModelConfig> config = parse_model_config(bytes);
    return config.ok() ? std::string() : config.message();
  });
}

}  // namespace
}  // namespace specstack
