// Small hand-written tokenizer.json files (the fuzz seed corpus) exercising
// the features the four golden tokenizers do not use: Metaspace, added-token
// lstrip/rstrip/single_word, subword prefix/suffix, every Split behaviour,
// unk fusing, Bert/Roberta post-processors, no decoder. Expected values are
// HF tokenizers 0.23.2's output for the same files and strings.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace specstack {
namespace {

Tokenizer load_corpus_tokenizer(const std::string& name) {
  const std::string path = testing::test_data("../fuzz/corpus/tokenizer_json/" + name + ".json");
  std::ifstream file(path, std::ios::binary);
  std::ostringstream text;
  text << file.rdbuf();
  auto tokenizer = Tokenizer::from_json(text.str(), "");
  EXPECT_TRUE(tokenizer.ok()) << path << ": " << tokenizer.message();
  return std::move(tokenizer).value();
}

struct Expected {
  std::string text;
  std::vector<int32_t> ids;               // add_special_tokens = false
  std::vector<int32_t> ids_with_special;  // add_special_tokens = true
  std::string decoded_with_special;
};

void check(const std::string& name, const std::vector<Expected>& cases) {
  const Tokenizer tokenizer = load_corpus_tokenizer(name);
  for (const Expected& c : cases) {
    SCOPED_TRACE(name + ": \"" + c.text + "\"");
    EXPECT_EQ(tokenizer.encode(c.text, false), c.ids);
    EXPECT_EQ(tokenizer.encode(c.text, true), c.ids_with_special);
    EXPECT_EQ(tokenizer.decode(c.ids_with_special), c.decoded_with_special);
    StreamDecoder stream(tokenizer);
    std::string streamed;
    for (const int32_t id : c.ids_with_special) streamed += stream.push(id);
    EXPECT_EQ(streamed + stream.flush(), c.decoded_with_special);
  }
}

TEST(TokenizerPipeline, ByteLevelWithStrippingAndSingleWordTokens) {
  check("byte_level_bpe", {
                              {"the cat is in",
                               {36, 26, 52, 26, 47, 26, 37},
                               {50, 36, 26, 52, 26, 47, 26, 37, 51},
                               "<|bos|> the cat is in<|eos|>"},
                              // "cat" is single_word: not inside "acat" nor before "_".
                              {"acat cat_ cat",
                               {38, 2, 42, 26, 2, 42, 26, 52},
                               {50, 38, 2, 42, 26, 2, 42, 26, 52, 51},
                               "<|bos|> acat cat cat<|eos|>"},
                              // <|eos|> has lstrip and rstrip: it swallows the spaces around it.
                              {"x  <|eos|>  y",
                               {26, 23, 51, 26, 24},
                               {50, 26, 23, 51, 26, 24, 51},
                               "<|bos|> x<|eos|> y<|eos|>"},
                              // Longest match first: "<|bos|>x" beats "<|bos|>".
                              {"<|bos|>xy<|bos|> x",
                               {53, 26, 24, 50, 26, 23},
                               {50, 53, 26, 24, 50, 26, 23, 51},
                               "<|bos|><|bos|>x y<|bos|> x<|eos|>"},
                              {"hello\nworld!",
                               {26, 35, 11, 11, 14, 33, 22, 14, 17, 11, 3, 29},
                               {50, 26, 35, 11, 11, 14, 33, 22, 14, 17, 11, 3, 29, 51},
                               "<|bos|> hello\nworld!<|eos|>"},
                          });
}

TEST(TokenizerPipeline, MetaspaceByteFallbackAndUnk) {
  check("metaspace_byte_fallback",
        {
            {"hello world", {14, 30, 41, 24, 39}, {1, 14, 30, 41, 24, 39}, "<s> hello world"},
            {" hello  the   world",
             {14, 30, 41, 24, 31, 39},
             {1, 14, 30, 41, 24, 31, 39},
             "<s> hello the world"},
            // "[NL]" is normalized and lstrip.
            {"hi [NL] he", {44, 21, 45, 14, 30}, {1, 44, 21, 45, 14, 30}, "<s> hi[NL] he"},
            {"a</s> b </s>", {32, 2, 14, 16, 14, 2}, {1, 32, 2, 14, 16, 14, 2}, "<s> a</s> b </s>"},
            // Byte fallback for what the vocab has bytes for, <unk> otherwise.
            {"é你😀q",
             {14, 12, 13, 5, 6, 7, 8, 9, 10, 11, 0},
             {1, 14, 12, 13, 5, 6, 7, 8, 9, 10, 11, 0},
             "<s> é你😀<unk>"},
            // NFC composes e + U+0301 before the model sees it.
            {"e\xCC\x81 caf\xC3\xA9",
             {14, 12, 13, 14, 17, 15, 12, 13, 0},
             {1, 14, 12, 13, 14, 17, 15, 12, 13, 0},
             "<s> é caé<unk>"},
        });
}

TEST(TokenizerPipeline, SplitBehavioursSubwordAffixesAndBert) {
  check("split_subword", {
                             {"abc abcd",
                              {44, 23, 42, 39, 25, 0},
                              {1, 44, 23, 42, 39, 25, 0, 2},
                              "[CLS]-abc abc[UNK][SEP]"},
                             {"ab_bc-c.x",
                              {44, 23, 37, 4, 38, 44, 25, 0, 0},
                              {1, 44, 23, 37, 4, 38, 44, 25, 0, 0, 2},
                              "[CLS]-ab bc -c[UNK][UNK][SEP]"},
                             {"a1234b,c",
                              {44, 36, 14, 0, 4, 0, 35},
                              {1, 44, 36, 14, 0, 4, 0, 35, 2},
                              "[CLS]-a 1[UNK]b[UNK]c [SEP]"},
                             {"xyzab zz.q",
                              {0, 10, 31, 0, 3, 37, 12, 0, 0, 0},
                              {1, 0, 10, 31, 0, 3, 37, 12, 0, 0, 0, 2},
                              "[CLS][UNK]xy[UNK]ab z[UNK][UNK][UNK][SEP]"},
                             {"", {}, {1, 2}, "[CLS][SEP]"},
                         });
}

TEST(TokenizerPipeline, MinimalFileWithoutDecoderJoinsWithSpaces) {
  check("minimal", {
                       {"abc", {4}, {4}, "abc"},
                       {"abcab", {4, 2}, {4, 2}, "abc ab"},
                       {"cba", {3, 1, 0}, {3, 1, 0}, "c b a"},
                       {"abd", {2}, {2}, "ab"},  // no unk_token: "d" is dropped
                   });
}

TEST(TokenizerPipeline, RobertaProcessorAndMergedWithNextSplit) {
  check("roberta_no_decoder",
        {
            {"hi", {3, 4}, {0, 3, 4, 1}, "<s> h i </s>"},
            {" hi  hi!", {6, 2, 6, 7}, {0, 6, 2, 6, 7, 1}, "<s> Ġhi Ġ Ġhi ! </s>"},
            {"h i", {3, 2, 4}, {0, 3, 2, 4, 1}, "<s> h Ġ i </s>"},
        });
}

TEST(TokenizerPipeline, EncodeIsThreadSafe) {
  const Tokenizer tokenizer = load_corpus_tokenizer("byte_level_bpe");
  const std::vector<int32_t> expected = tokenizer.encode("the cat is in the hat", true);
  std::vector<std::thread> threads;
  std::vector<int> mismatches(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i)
        mismatches[t] += tokenizer.encode("the cat is in the hat", true) != expected;
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(mismatches, std::vector<int>(4, 0));
}

}  // namespace
}  // namespace specstack
