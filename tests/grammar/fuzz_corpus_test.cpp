// Replays the grammar fuzz seed corpora (tests/fuzz/corpus/gbnf and
// json_schema) in the ordinary test build. Naming rule of the seeds:
// "bad_*" must be rejected, every other file accepted.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>

#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "test_util.h"

namespace specstack::grammar {
namespace {

namespace fs = std::filesystem;

template <typename Parse>
void replay(const std::string& name, Parse parse) {
  std::vector<std::string> files;
  for (const auto& entry : fs::directory_iterator(testing::test_data("../fuzz/corpus/" + name))) {
    files.push_back(entry.path().string());
  }
  std::sort(files.begin(), files.end());
  ASSERT_GE(files.size(), 4u);
  int n_good = 0, n_bad = 0;
  for (const std::string& path : files) {
    const std::string error = parse(testing::read_text(path));
    if (fs::path(path).filename().string().rfind("bad_", 0) == 0) {
      ++n_bad;
      EXPECT_FALSE(error.empty()) << path << " was accepted";
    } else {
      ++n_good;
      EXPECT_TRUE(error.empty()) << path << ": " << error;
    }
  }
  EXPECT_GT(n_good, 0);
  EXPECT_GT(n_bad, 0);
}

TEST(GrammarFuzzCorpus, Gbnf) {
  replay("gbnf", [](const std::string& text) {
    auto g = parse_gbnf(text);
    return g.ok() ? std::string() : g.message();
  });
}

TEST(GrammarFuzzCorpus, JsonSchema) {
  replay("json_schema", [](const std::string& text) {
    auto gbnf = json_schema_to_gbnf(nlohmann::ordered_json::parse(text));
    if (!gbnf.ok()) return gbnf.message();
    auto g = parse_gbnf(*gbnf);
    return g.ok() ? std::string() : "compiled GBNF does not parse: " + g.message();
  });
}

}  // namespace
}  // namespace specstack::grammar
