// Prompts for the quality and acceptance evals (`eval needle|json|ppl`,
// `eval spec`): story filler written by a small filler model (TinyStories by
// default, as the eval pair was trained on) and needle-retrieval prompts
// built in it. Works with any tokenizer.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace specstack::cli {

struct EvalCase {
  std::vector<int32_t> ids;  // with BOS as the tokenizer adds it
  std::string answer;        // the expected answer ("" where none)
  std::string group;         // e.g. "depth 50%"
};

// Story text sampled from the model in `dir` (seeded), at least `min_chars` long.
Result<std::string> make_filler(const std::string& dir, int threads, size_t min_chars,
                                uint32_t seed);

// Filler cut to about `n_tokens` tokens of `tok`, starting at a random story
// and ending at a sentence.
std::string filler_slice(const std::string& filler, const Tokenizer& tok, int32_t n_tokens,
                         std::mt19937& rng);

// "The secret code for <Name> is <7 digits>." inside `context` tokens of
// filler at each depth, `n` per depth, then "Question: What is the secret
// code for <Name>?\nAnswer:". The answer is the code.
std::vector<EvalCase> needle_cases(const Tokenizer& tok, const std::string& filler,
                                   const std::vector<double>& depths, int32_t n, int32_t context,
                                   uint32_t seed);

// A name for prompts built from `rng` (the needle's and the JSON probe's).
std::string random_name(std::mt19937& rng);

}  // namespace specstack::cli
