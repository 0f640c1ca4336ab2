// Tokenizer::token_bytes: the raw bytes one token adds mid-text, for grammar
// masks: byte-level BPE stand-ins mapped back (no U+FFFD for half a
// character), SentencePiece's ▁ as a space and <0xXX> as its byte, with no
// start-of-text stripping.
#include <gtest/gtest.h>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace specstack {
namespace {

Tokenizer load(const std::string& dir) {
  auto t =
      Tokenizer::from_json(testing::read_text(testing::test_data(dir + "/tokenizer.json")),
                           testing::read_text(testing::test_data(dir + "/tokenizer_config.json")));
  EXPECT_TRUE(t.ok()) << (t.ok() ? "" : t.message());
  return std::move(t).value();
}

std::string joined(const Tokenizer& t, const std::vector<int32_t>& ids) {
  std::string out;
  for (int32_t id : ids) out += t.token_bytes(id);
  return out;
}

TEST(TokenBytes, SentencePieceByteFallback) {
  const Tokenizer t = load("golden/tokenizers/mistral-v0.1");
  const auto space_the = t.token_to_id("▁the");
  ASSERT_TRUE(space_the.has_value());
  EXPECT_EQ(t.token_bytes(*space_the), " the");  // not stripped: mid-text
  const auto newline = t.token_to_id("<0x0A>");
  ASSERT_TRUE(newline.has_value());
  EXPECT_EQ(t.token_bytes(*newline), "\n");
  const auto high = t.token_to_id("<0xE2>");
  ASSERT_TRUE(high.has_value());
  EXPECT_EQ(t.token_bytes(*high), "\xE2");  // half a character, kept raw
  // Mid-text, the tokens of a text carry its bytes (after the prefix space
  // the Metaspace pre-tokenizer adds).
  EXPECT_EQ(joined(t, t.encode("Hi €\n{", false)), " Hi €\n{");
  EXPECT_EQ(t.token_bytes(-1), "");
}

TEST(TokenBytes, ByteLevelRoundTripsJsonText) {
  const Tokenizer t = load("grammar/json-bytes-512");
  const std::string text = "{\"name\": \"Zoë\", \"v\": [1, true]}\n";
  EXPECT_EQ(joined(t, t.encode(text, false)), text);
  EXPECT_EQ(t.token_bytes(2), "</s>");  // an added token: its content
}

}  // namespace
}  // namespace specstack
