// The tokenizer from GGUF metadata equals the tokenizer.json path on the
// golden tokenizer cases. The GGUF vocabularies are written here the way
// llama.cpp's convert_hf_to_gguf.py writes them from the same tokenizer.json
// (token list by id, token types, merges or SentencePiece scores, special
// ids, pre-tokenizer name), and TinyStories' comes from the committed
// tests/data/gguf file (made by tests/data/gguf/make_gguf.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "base/check.h"
#include "gguf_builder.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace specstack {
namespace {

using nlohmann::json;
using testing::GgufBuilder;
using testing::read_text;

std::string golden_dir(const std::string& name) {
  return testing::test_data("golden/tokenizers/" + name);
}

std::string tokenizer_json_path(const std::string& name) {
  if (name == "llama3" || name == "qwen3") return testing::npm_tokenizer_json(name);
  if (name == "tinystories")
    return testing::golden_model_dir("tinystories-656k") + "/tokenizer.json";
  return golden_dir(name) + "/tokenizer.json";
}

std::string write_temp(const std::string& name, const std::string& bytes) {
  const std::string path = ::testing::TempDir() + "/gguf_tokenizer_" + name + ".gguf";
  FILE* f = std::fopen(path.c_str(), "wb");
  SS_CHECK(f != nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return path;
}

std::string token_content(const json& value) {
  return value.is_object() ? value["content"].get<std::string>() : value.get<std::string>();
}

// convert_hf_to_gguf.py's vocabulary for a tokenizer.json: gpt2 (byte BPE
// with merges) or llama (SentencePiece; scores ranked like the merges).
std::string gguf_vocab(const std::string& name, bool* spm) {
  const json tj = json::parse(read_text(tokenizer_json_path(name)));
  const json tc = json::parse(read_text(golden_dir(name) + "/tokenizer_config.json"));
  const json& vocab = tj["model"]["vocab"];
  std::map<int64_t, std::string> by_id;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) by_id[it.value()] = it.key();
  std::map<int64_t, int64_t> type_of;
  std::map<std::string, int64_t> special_ids;
  for (const json& a : tj["added_tokens"]) {
    by_id[a["id"]] = a["content"];
    type_of[a["id"]] = a["special"].get<bool>() ? 3 : 4;  // CONTROL / USER_DEFINED
    special_ids[a["content"]] = a["id"];
  }
  const int64_t n = by_id.rbegin()->first + 1;
  std::vector<std::string> tokens;
  std::vector<int32_t> types;
  for (int64_t i = 0; i < n; ++i) {
    auto it = by_id.find(i);
    tokens.push_back(it == by_id.end() ? "[PAD" + std::to_string(i) + "]" : it->second);
    int32_t type = it == by_id.end() ? 5 : 1;
    if (type_of.count(i)) type = int32_t(type_of[i]);
    types.push_back(type);
  }
  *spm = tj["model"]["byte_fallback"].get<bool>();
  GgufBuilder b;
  b.str("general.architecture", "llama");
  std::vector<std::string> merges;
  for (const json& m : tj["model"]["merges"]) {
    merges.push_back(m.is_string() ? m.get<std::string>()
                                   : m[0].get<std::string>() + " " + m[1].get<std::string>());
  }
  if (*spm) {
    std::map<std::string, size_t> rank;
    for (size_t r = 0; r < merges.size(); ++r) {
      const size_t space = merges[r].find(' ');
      rank.emplace(merges[r].substr(0, space) + merges[r].substr(space + 1), r);
    }
    std::vector<float> scores;
    for (int64_t i = 0; i < n; ++i) {
      const std::string& t = tokens[size_t(i)];
      auto it = rank.find(t);
      scores.push_back(-float(it == rank.end() ? rank.size() + size_t(i) : it->second));
      if (t.size() == 6 && t.rfind("<0x", 0) == 0 && t.back() == '>') types[size_t(i)] = 6;
    }
    const std::string unk = tj["model"]["unk_token"];
    types[size_t(vocab[unk].get<int64_t>())] = 2;
    b.str("tokenizer.ggml.model", "llama").str("tokenizer.ggml.pre", "default");
    b.numbers<float>("tokenizer.ggml.scores", 6, scores);
    b.u32("tokenizer.ggml.unknown_token_id", vocab[unk].get<uint32_t>());
  } else {
    b.str("tokenizer.ggml.model", "gpt2");
    b.str("tokenizer.ggml.pre", name == "llama3" ? "llama-bpe" : "qwen2");
    b.strings("tokenizer.ggml.merges", merges);
  }
  b.strings("tokenizer.ggml.tokens", tokens);
  b.numbers<int32_t>("tokenizer.ggml.token_type", 5, types);
  auto id_of = [&](const std::string& t) -> int64_t {
    if (vocab.contains(t)) return vocab[t];
    return special_ids.count(t) ? special_ids[t] : -1;
  };
  if (tc.contains("bos_token") && !tc["bos_token"].is_null()) {
    b.u32("tokenizer.ggml.bos_token_id", uint32_t(id_of(token_content(tc["bos_token"]))));
  }
  if (tc.contains("eos_token") && !tc["eos_token"].is_null()) {
    b.u32("tokenizer.ggml.eos_token_id", uint32_t(id_of(token_content(tc["eos_token"]))));
  }
  // What HF's encode(add_special_tokens=True) does with this tokenizer.json:
  // a TemplateProcessing post-processor adds BOS (the npm Llama-3 file has none).
  const json& post = tj["post_processor"];
  b.boolean("tokenizer.ggml.add_bos_token",
            post.is_object() && post["type"] == "TemplateProcessing");
  if (tc.contains("chat_template")) b.str("tokenizer.chat_template", tc["chat_template"]);
  return b.build();
}

// normalized_specials: HF's TinyStories file marks its special tokens
// "normalized", which GGUF does not record. HF then matches them only after
// the "▁" normalization (so "<|end_story|>" right after text is split into
// pieces, where llama.cpp and we match it) and decodes <unk> with a space
// before it. There, texts holding a special token's spelling and decodes of
// ids holding <unk> are not compared; every other case is.
void expect_same_as_tokenizer_json(const Tokenizer& gguf, const std::string& name,
                                   bool normalized_specials = false) {
  auto hf = Tokenizer::from_json(read_text(tokenizer_json_path(name)),
                                 read_text(golden_dir(name) + "/tokenizer_config.json"));
  ASSERT_TRUE(hf.ok()) << hf.message();
  const json cases = json::parse(read_text(golden_dir(name) + "/cases.json"));
  ASSERT_GE(cases["cases"].size(), 40u);
  size_t compared = 0;
  for (const json& c : cases["cases"]) {
    const std::string text = c["text"];
    const auto ids = c["ids"].get<std::vector<int32_t>>();
    const auto with_special = c["ids_with_special"].get<std::vector<int32_t>>();
    if (normalized_specials && text.find("<|") != std::string::npos) continue;
    ++compared;
    EXPECT_EQ(gguf.encode(text, false), ids) << name << ": " << text;
    EXPECT_EQ(gguf.encode(text, true), with_special) << name << ": " << text;
    if (normalized_specials && std::find(ids.begin(), ids.end(), 0) != ids.end()) continue;
    EXPECT_EQ(gguf.decode(ids), c["decoded"].get<std::string>()) << name << ": " << text;
    EXPECT_EQ(gguf.decode(with_special), hf->decode(with_special)) << name << ": " << text;
  }
  EXPECT_GE(compared, 40u) << name;
  EXPECT_EQ(gguf.bos_id(), hf->bos_id());
  EXPECT_EQ(gguf.eos_id(), hf->eos_id());
  EXPECT_EQ(gguf.chat_template(), hf->chat_template());
  for (int32_t id : {0, 1, 2, 100, 1000}) {
    EXPECT_EQ(gguf.id_to_token(id), hf->id_to_token(id)) << id;
    EXPECT_EQ(gguf.is_special(id), hf->is_special(id)) << id;
  }
}

class GgufTokenizerTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufTokenizerTest, EqualsTokenizerJsonOnGoldenCases) {
  const std::string name = GetParam();
  if (tokenizer_json_path(name).empty())
    GTEST_FAIL() << name << " npm tokenizer missing: scripts/setup.sh";
  bool spm = false;
  const std::string path = write_temp(name, gguf_vocab(name, &spm));
  const auto start = std::chrono::steady_clock::now();
  auto tokenizer = Tokenizer::load_dir(path);
  std::printf("%s: tokenizer from GGUF in %.3f s\n", name.c_str(),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.message();
  expect_same_as_tokenizer_json(*tokenizer, name);
  std::remove(path.c_str());
}

INSTANTIATE_TEST_SUITE_P(Golden, GgufTokenizerTest,
                         ::testing::Values("llama3", "qwen3", "mistral-v0.1"),
                         [](const auto& info) {
                           return info.param == "mistral-v0.1" ? std::string("mistral")
                                                               : info.param;
                         });

TEST(GgufTokenizerFileTest, TinyStoriesFileEqualsItsTokenizerJson) {
  auto tokenizer = Tokenizer::load_dir(testing::test_data("gguf/tinystories-656k.q8_0.gguf"));
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.message();
  expect_same_as_tokenizer_json(*tokenizer, "tinystories", /*normalized_specials=*/true);
}

TEST(GgufTokenizerErrorsTest, UnsupportedModelAndPreAreNamed) {
  GgufBuilder a;
  a.str("tokenizer.ggml.model", "t5").strings("tokenizer.ggml.tokens", {"a"});
  auto r = Tokenizer::load_dir(write_temp("t5", a.build()));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("tokenizer.ggml.model 't5' is not supported"), std::string::npos)
      << r.message();
  GgufBuilder b;
  b.str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.pre", "deepseek-coder");
  b.strings("tokenizer.ggml.tokens", {"a"}).strings("tokenizer.ggml.merges", {});
  r = Tokenizer::load_dir(write_temp("pre", b.build()));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("tokenizer.ggml.pre 'deepseek-coder' is not supported"),
            std::string::npos)
      << r.message();
  GgufBuilder c;
  c.str("general.architecture", "llama");
  r = Tokenizer::load_dir(write_temp("none", c.build()));
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.message().find("missing metadata key 'tokenizer.ggml.model'"), std::string::npos)
      << r.message();
}

TEST(GgufTokenizerErrorsTest, Llama3PreAddsBosByDefault) {
  // No add_bos_token key: llama.cpp adds BOS for llama-bpe vocabularies.
  GgufBuilder b;
  b.str("tokenizer.ggml.model", "gpt2").str("tokenizer.ggml.pre", "llama-bpe");
  b.strings("tokenizer.ggml.tokens", {"a", "b", "ab", "<|begin_of_text|>"});
  b.numbers<int32_t>("tokenizer.ggml.token_type", 5, {1, 1, 1, 3});
  b.strings("tokenizer.ggml.merges", {"a b"}).u32("tokenizer.ggml.bos_token_id", 3);
  auto r = Tokenizer::load_dir(write_temp("bos", b.build()));
  ASSERT_TRUE(r.ok()) << r.message();
  EXPECT_EQ(r->encode("ab", true), (std::vector<int32_t>{3, 2}));
  EXPECT_EQ(r->encode("ab", false), (std::vector<int32_t>{2}));
}

}  // namespace
}  // namespace specstack
