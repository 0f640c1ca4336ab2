// UTF-8 handling, NFC and the streaming decoder's hold-back rules.
#include <gtest/gtest.h>

#include "tokenizer/nfc.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace specstack {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

TEST(Utf8, LossyMatchesRustFromUtf8Lossy) {
  EXPECT_EQ(tok::utf8_lossy("plain"), "plain");
  EXPECT_EQ(tok::utf8_lossy("\xE4\xBD\xA0"), "你");
  EXPECT_EQ(tok::utf8_lossy("\xE4\xBD"), kFffd);  // incomplete at the end: one
  EXPECT_EQ(tok::utf8_lossy("\xE4\xBDx"), kFffd + "x");
  EXPECT_EQ(tok::utf8_lossy("\xFF\xFE"), kFffd + kFffd);
  EXPECT_EQ(tok::utf8_lossy("\xC0\x80"), kFffd + kFffd);              // overlong
  EXPECT_EQ(tok::utf8_lossy("\xED\xA0\x80"), kFffd + kFffd + kFffd);  // surrogate
  EXPECT_EQ(tok::utf8_lossy("\xF0\x9F\x98"), kFffd);
  EXPECT_EQ(tok::utf8_lossy("\xF4\x90\x80\x80"), kFffd + kFffd + kFffd + kFffd);  // > U+10FFFF
  EXPECT_TRUE(tok::is_valid_utf8("\xF0\x9F\x98\x80"));
  EXPECT_FALSE(tok::is_valid_utf8("\x80"));
}

TEST(Nfc, ComposesReordersAndHandlesHangul) {
  EXPECT_EQ(tok::to_nfc("plain ascii"), "plain ascii");
  EXPECT_EQ(tok::to_nfc("e\xCC\x81"), "\xC3\xA9");  // e + U+0301 -> é
  // a + U+0301 + U+0323: reordered (220 before 230), a+U+0323 -> U+1EA1.
  EXPECT_EQ(tok::to_nfc("a\xCC\x81\xCC\xA3"), "\xE1\xBA\xA1\xCC\x81");
  EXPECT_EQ(tok::to_nfc("\xE2\x84\xAB"), "\xC3\x85");      // U+212B ANGSTROM SIGN -> Å (singleton)
  EXPECT_EQ(tok::to_nfc("\xCD\x84"), "\xCC\x88\xCC\x81");  // U+0344 -> U+0308 U+0301
  EXPECT_EQ(tok::to_nfc("\xE1\x84\x80\xE1\x85\xA1\xE1\x86\xA8"), "\xEA\xB0\x81");  // jamo -> 각
  EXPECT_EQ(tok::to_nfc("\xEA\xB0\x81"), "\xEA\xB0\x81");
  EXPECT_EQ(tok::to_nfc("\xCC\x81"
                        "a"),
            "\xCC\x81"
            "a");  // leading combining mark stays
}

// A SentencePiece-style tokenizer (Strip decoder, byte fallback) built inline.
Tokenizer sentencepiece_like() {
  auto tokenizer = Tokenizer::from_json(R"({
    "added_tokens": [{"id": 0, "content": "<s>", "special": true, "normalized": false}],
    "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"},
                   {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "decoder": {"type": "Sequence", "decoders": [
      {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
      {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "byte_fallback": true, "vocab": {"<s>": 0, "▁": 1, "a": 2, "▁a": 3,
      "<0xF0>": 4, "<0x9F>": 5, "<0x98>": 6, "<0x80>": 7, "<0x41>": 8}, "merges": ["▁ a"]}})",
                                        "");
  EXPECT_TRUE(tokenizer.ok()) << tokenizer.message();
  return std::move(tokenizer).value();
}

TEST(StreamDecoder, HoldsByteRunsUntilTheyEnd) {
  const Tokenizer tokenizer = sentencepiece_like();
  const std::vector<int32_t> ids = tokenizer.encode("a 😀 a", false);
  ASSERT_EQ(ids, (std::vector<int32_t>{3, 1, 4, 5, 6, 7, 3}));
  StreamDecoder stream(tokenizer);
  EXPECT_EQ(stream.push(3), "a");  // the leading space is stripped
  EXPECT_EQ(stream.push(1), " ");
  for (const int32_t id : {4, 5, 6, 7}) EXPECT_EQ(stream.push(id), "") << id;
  EXPECT_EQ(stream.push(3), "😀 a");
  EXPECT_EQ(stream.flush(), "");
}

TEST(StreamDecoder, InvalidByteRunBecomesOneReplacementPerByteLikeDecode) {
  const Tokenizer tokenizer = sentencepiece_like();
  // <0x41> alone is "A", but the run <0x41><0xF0> is invalid as a whole: HF
  // shows two U+FFFD, so nothing may be streamed before the run ends.
  const std::vector<int32_t> ids = {3, 8, 4, 3};
  StreamDecoder stream(tokenizer);
  std::string text;
  for (const int32_t id : ids) text += stream.push(id);
  text += stream.flush();
  EXPECT_EQ(text, tokenizer.decode(ids));
  EXPECT_EQ(text, "a" + kFffd + kFffd + " a");
}

TEST(StreamDecoder, LeadingSpaceAfterSkippedSpecialToken) {
  const Tokenizer tokenizer = sentencepiece_like();
  const std::vector<int32_t> ids = {0, 3, 0, 3, 1, 0, 3};
  for (const bool skip : {false, true}) {
    StreamDecoder stream(tokenizer, skip);
    std::string text;
    for (const int32_t id : ids) text += stream.push(id);
    EXPECT_EQ(text + stream.flush(), tokenizer.decode(ids, skip)) << "skip " << skip;
  }
}

TEST(StreamDecoder, FlushStartsANewStream) {
  const Tokenizer tokenizer = sentencepiece_like();
  StreamDecoder stream(tokenizer);
  EXPECT_EQ(stream.push(4), "");
  EXPECT_EQ(stream.flush(), kFffd);  // an unfinished run is shown as HF would
  EXPECT_EQ(stream.push(3), "a");    // the new stream strips its leading space again
  EXPECT_EQ(stream.push(-5), "");    // unknown ids are dropped, like decode does
  EXPECT_EQ(stream.push(1000), "");
  EXPECT_EQ(stream.flush(), "");
}

TEST(Encode, InvalidUtf8InputIsReplacedFirst) {
  const Tokenizer tokenizer = sentencepiece_like();
  EXPECT_EQ(tokenizer.encode("a\xFF"
                             "a",
                             false),
            tokenizer.encode("a" + kFffd + "a", false));
  EXPECT_EQ(tokenizer.decode(tokenizer.encode("a\xF0\x9F", false)), "a");  // no bytes for U+FFFD
}

}  // namespace
}  // namespace specstack
