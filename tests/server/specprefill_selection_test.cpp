// usage.specprefill.selection (specprefill_return_selection): present only
// when asked and the server has a draft, shaped as the web UI reads it
// (chunk ranges, importance, kept flags that add up to kept_tokens, token
// texts that add up to the prompt), null when speculative prefill did not
// apply, and in the streamed usage chunk even without include_usage.
#include "server/specprefill_selection.h"

#include <gtest/gtest.h>

#include "fake_engine_server.h"
#include "server/http_server.h"
#include "server_test_util.h"

namespace specstack {
namespace {

class SpecPrefillSelectionTest : public testing::FakeEngineServerTest {
 protected:
  // A 10-token prompt in chunks of 4: [0, 4), [4, 8), [8, 10); chunks 0 and 2
  // kept, 6 tokens. Multi-byte characters so token texts are cut honestly.
  void SetUp() override {
    FakeEngineServerTest::SetUp();
    prompt_ = tokenizer_->encode("Tom said: café, naïve über-dog ran far", false);
    prompt_.resize(10);
    auto selection = std::make_shared<SpecPrefillSelection>();
    selection->chunk = 4;
    selection->first_position = 0;
    selection->chunk_scores = {0.5f, 0.125f, 0.75f};
    selection->kept_chunks = {0, 2};
    SpecPrefillStats& stats = engine_.stats.specprefill;
    stats.applied = true;
    stats.prompt_tokens = 10;
    stats.kept_tokens = 6;
    stats.scoring_ms = 2.5;
    stats.selection = selection;
  }

  void start(bool with_draft) {
    HttpServerOptions options;
    options.specprefill_usage = with_draft;
    start_server(options);
  }

  std::string body(const std::string& extra) const {
    return R"({"prompt": )" + OrderedJson(prompt_).dump() + extra + "}";
  }

  std::vector<int32_t> prompt_;
};

TEST_F(SpecPrefillSelectionTest, PresentOnlyWhenAsked) {
  start(/*with_draft=*/true);
  const OrderedJson plain = post("/v1/completions", body(""));
  ASSERT_TRUE(plain["usage"]["specprefill"].is_object()) << plain.dump();
  EXPECT_FALSE(plain["usage"]["specprefill"].contains("selection"));
  const OrderedJson off =
      post("/v1/completions", body(R"(, "specprefill_return_selection": false)"));
  EXPECT_FALSE(off["usage"]["specprefill"].contains("selection"));
  httplib::Client cli("127.0.0.1", port_);
  auto res = cli.Post("/v1/completions", body(R"(, "specprefill_return_selection": 1)"),
                      "application/json");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 400);
  const OrderedJson bad = OrderedJson::parse(res->body);
  EXPECT_EQ(bad["error"]["type"], "invalid_request_error") << bad.dump();
  EXPECT_NE(bad["error"]["message"].get<std::string>().find("specprefill_return_selection"),
            std::string::npos);
}

TEST_F(SpecPrefillSelectionTest, ShapeMatchesUsage) {
  start(/*with_draft=*/true);
  const OrderedJson response =
      post("/v1/completions", body(R"(, "extra_body": {"specprefill_return_selection": true})"));
  const OrderedJson& specprefill = response["usage"]["specprefill"];
  const OrderedJson& selection = specprefill["selection"];
  ASSERT_TRUE(selection.is_object()) << response.dump();
  EXPECT_EQ(selection["chunk_size"], 4);
  EXPECT_EQ(selection["prefix_tokens"], 0);
  EXPECT_EQ(selection["chunks"].dump(), "[[0,4],[4,8],[8,10]]");
  EXPECT_EQ(selection["importance"].dump(), "[0.5,0.125,0.75]");
  EXPECT_EQ(selection["kept"].dump(), "[true,false,true]");
  EXPECT_EQ(selection["kept_chunks"], 2);
  EXPECT_DOUBLE_EQ(selection["kept_fraction"].get<double>(), 0.6);
  // The kept ranges add up to usage.specprefill.kept_tokens.
  int64_t kept = 0;
  for (size_t i = 0; i < selection["chunks"].size(); ++i) {
    if (selection["kept"][i])
      kept += selection["chunks"][i][1].get<int64_t>() - selection["chunks"][i][0].get<int64_t>();
  }
  EXPECT_EQ(kept, specprefill["kept_tokens"]);
  // One text per prompt token; together they are the prompt.
  ASSERT_EQ(selection["token_texts"].size(), prompt_.size());
  std::string joined;
  for (const auto& text : selection["token_texts"]) joined += text.get<std::string>();
  EXPECT_EQ(joined, tokenizer_->decode(prompt_));
}

TEST_F(SpecPrefillSelectionTest, StreamedInTheUsageChunkEvenWithoutIncludeUsage) {
  start(/*with_draft=*/true);
  const OrderedJson usage = streamed_usage(
      "/v1/completions", body(R"(, "stream": true, "specprefill_return_selection": true)"));
  ASSERT_TRUE(usage["specprefill"]["selection"].is_object()) << usage.dump();
  EXPECT_EQ(usage["specprefill"]["selection"]["kept"].size(), 3u);
}

TEST_F(SpecPrefillSelectionTest, NullWhenNotApplied) {
  engine_.stats.specprefill = SpecPrefillStats{};
  engine_.stats.specprefill.prompt_tokens = 10;
  engine_.stats.specprefill.kept_tokens = 10;
  engine_.stats.specprefill.fallback_reason = "draft KV cache exhausted";
  start(/*with_draft=*/true);
  const OrderedJson response =
      post("/v1/completions", body(R"(, "specprefill_return_selection": true)"));
  const OrderedJson& specprefill = response["usage"]["specprefill"];
  ASSERT_TRUE(specprefill.contains("selection")) << response.dump();
  EXPECT_TRUE(specprefill["selection"].is_null());
  EXPECT_EQ(specprefill["fallback_reason"], "draft KV cache exhausted");
}

// Without a draft there is nothing to select: the field is accepted and
// ignored, as the other speculative controls are, and usage keeps OpenAI's shape.
TEST_F(SpecPrefillSelectionTest, IgnoredWithoutADraft) {
  start(/*with_draft=*/false);
  const OrderedJson response =
      post("/v1/completions", body(R"(, "specprefill_return_selection": true)"));
  ASSERT_TRUE(response["usage"].is_object()) << response.dump();
  EXPECT_FALSE(response["usage"].contains("specprefill"));
}

TEST(SpecPrefillSelectionJson, CachedPrefixIsOutsideTheChunks) {
  auto tokenizer = testing::load_tinystories_tokenizer();
  ASSERT_NE(tokenizer, nullptr);
  const std::vector<int32_t> prompt = tokenizer->encode("Once upon a time there was a dog", false);
  ASSERT_GE(prompt.size(), 7u);
  SpecPrefillStats stats;
  stats.applied = true;
  stats.prompt_tokens = static_cast<int64_t>(prompt.size()) - 3;
  auto selection = std::make_shared<SpecPrefillSelection>();
  selection->chunk = 2;
  selection->first_position = 3;  // three cached tokens were not scored
  selection->chunk_scores.assign((prompt.size() - 3 + 1) / 2, 1.0f);
  selection->kept_chunks = {0};
  stats.selection = selection;
  const OrderedJson json = specprefill_selection_json(stats, prompt, *tokenizer);
  EXPECT_EQ(json["prefix_tokens"], 3);
  EXPECT_EQ(json["chunks"][0].dump(), "[3,5]");
  EXPECT_EQ(json["chunks"].back()[1], static_cast<int64_t>(prompt.size()));
  EXPECT_DOUBLE_EQ(json["kept_fraction"].get<double>(),
                   2.0 / static_cast<double>(prompt.size() - 3));
}

}  // namespace
}  // namespace specstack
