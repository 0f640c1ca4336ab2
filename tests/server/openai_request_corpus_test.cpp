// Replays the openai_request fuzz seeds (tests/fuzz/corpus/openai_request)
// through parse_openai_request in every ordinary build, against the same
// served model as the fuzz target. Seed naming: "bad_*" must be rejected,
// every other file accepted; names containing "chat" are chat-completions
// bodies, the rest completions bodies.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "fuzz/openai_request_model.h"
#include "server/errors.h"
#include "test_util.h"

namespace specstack {
namespace {

namespace fs = std::filesystem;
using fuzzing::check_accepted_request;

std::vector<fs::path> seed_files() {
  std::vector<fs::path> files;
  for (const auto& entry :
       fs::directory_iterator(testing::test_data("../fuzz/corpus/openai_request"))) {
    if (entry.is_regular_file()) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class OpenAiRequestCorpusTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loaded = fuzzing::make_fuzz_served_model(testing::test_data(""));
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    model_ = std::move(loaded).value();
  }
  std::unique_ptr<fuzzing::FuzzServedModel> model_;
};

TEST_F(OpenAiRequestCorpusTest, SeedsParseAsNamed) {
  const std::vector<fs::path> files = seed_files();
  ASSERT_GE(files.size(), 6u);
  int n_good = 0, n_bad = 0, n_chat = 0;
  for (const fs::path& path : files) {
    const std::string name = path.filename().string();
    SCOPED_TRACE(name);
    auto body = fuzzing::read_fuzz_data_file(path.string());
    ASSERT_TRUE(body.ok()) << body.message();
    EXPECT_LT(body->size(), 2048u) << "seeds stay small";
    const bool chat = name.find("chat") != std::string::npos;
    const ApiEndpoint endpoint =
        chat ? ApiEndpoint::kApiChatCompletions : ApiEndpoint::kApiCompletions;
    n_chat += chat;
    auto request = parse_openai_request(endpoint, *body, model_->served);
    if (name.rfind("bad_", 0) == 0) {
      ++n_bad;
      ASSERT_FALSE(request.ok()) << "accepted";
      EXPECT_FALSE(request.message().empty());
      const int status = http_status_for(request.error().code);
      EXPECT_EQ(status, name == "bad_unknown_model.json" ? 404 : 400) << request.message();
    } else {
      ++n_good;
      ASSERT_TRUE(request.ok()) << request.message();
      EXPECT_EQ(request->endpoint, endpoint);
      EXPECT_EQ(check_accepted_request(*request, model_->served), "");
    }
  }
  EXPECT_GT(n_good, 0);
  EXPECT_GT(n_bad, 0);
  EXPECT_GT(n_chat, 0);
}

// As the fuzz target does: every seed on both endpoints either fails with a
// message or gives a request the engine accepts.
TEST_F(OpenAiRequestCorpusTest, SeedsOnBothEndpointsKeepTheRules) {
  for (const fs::path& path : seed_files()) {
    SCOPED_TRACE(path.filename().string());
    auto body = fuzzing::read_fuzz_data_file(path.string());
    ASSERT_TRUE(body.ok()) << body.message();
    for (const ApiEndpoint endpoint :
         {ApiEndpoint::kApiCompletions, ApiEndpoint::kApiChatCompletions}) {
      auto request = parse_openai_request(endpoint, *body, model_->served);
      if (request.ok()) {
        EXPECT_EQ(check_accepted_request(*request, model_->served), "");
      } else {
        EXPECT_FALSE(request.message().empty());
      }
    }
  }
}

}  // namespace
}  // namespace specstack
