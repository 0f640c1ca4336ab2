#include "cli/soak_workload.h"

#include <nlohmann/json.hpp>
#include <random>

namespace specstack::cli {
namespace {

// Plain English words: every tokenizer encodes them, and with a small model
// (tinystories) they make prompts that look like its training text.
constexpr const char* kWords[] = {
    "once", "upon",  "a",     "time", "there",  "was",    "little", "girl",  "named", "Lily",
    "she",  "loved", "to",    "play", "in",     "the",    "park",   "with",  "her",   "dog",
    "one",  "day",   "saw",   "big",  "red",    "ball",   "and",    "happy", "they",  "went",
    "home", "sun",   "tree",  "bird", "sang",   "mom",    "said",   "you",   "can",   "friend",
    "Tom",  "boat",  "river", "cake", "smiled", "jumped", "very",   "fast",  "slow",  "blue"};

// Strings that do occur in such text, so some requests really stop early.
constexpr const char* kStops[] = {".", " the", "\n", "!", " and"};

// A body the server must refuse with a 4xx, and what is wrong with it.
struct Malformation {
  const char* kind;
  const char* body;
};
constexpr Malformation kMalformed[] = {
    {"bad-json", "{\"prompt\": \"once upon\", \"max_tokens\": 4"},
    {"no-prompt", "{\"max_tokens\": 4}"},
    {"prompt-type", "{\"prompt\": {\"text\": 1}, \"max_tokens\": 4}"},
    {"max-tokens-negative", "{\"prompt\": \"once\", \"max_tokens\": -3}"},
    {"n-zero", "{\"prompt\": \"once\", \"max_tokens\": 4, \"n\": 0}"},
    {"temperature-range", "{\"prompt\": \"once\", \"max_tokens\": 4, \"temperature\": -1}"},
    {"unknown-model", "{\"model\": \"no-such-model\", \"prompt\": \"once\", \"max_tokens\": 4}"},
    {"not-an-object", "[1, 2, 3]"},
};

}  // namespace

SoakRequest make_soak_request(uint32_t seed, int64_t index, const SoakMix& mix,
                              const std::string& model) {
  std::seed_seq seq{seed, static_cast<uint32_t>(index), static_cast<uint32_t>(index >> 32)};
  std::mt19937_64 rng(seq);
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };

  SoakRequest request;
  if (chance(mix.malformed_fraction)) {
    const Malformation& m = kMalformed[pick(std::size(kMalformed))];
    request.body = m.body;
    request.malformed = true;
    request.kind = m.kind;
    return request;
  }
  const int64_t n_words = 1 + static_cast<int64_t>(pick(static_cast<size_t>(mix.max_prompt_words)));
  std::string prompt;
  for (int64_t w = 0; w < n_words; ++w) {
    if (w) prompt += ' ';
    prompt += kWords[pick(std::size(kWords))];
  }
  nlohmann::ordered_json body = {
      {"model", model},
      {"prompt", prompt},
      {"max_tokens", 1 + static_cast<int64_t>(pick(static_cast<size_t>(mix.max_tokens)))},
      {"n", 1 + static_cast<int64_t>(pick(3))},
      {"temperature", chance(0.5) ? 0.0 : 0.8},
      {"seed", static_cast<int64_t>(rng() % 1000000)},
  };
  if (chance(mix.logprobs_fraction)) body["logprobs"] = 1 + static_cast<int64_t>(pick(3));
  if (chance(mix.stop_fraction)) body["stop"] = {kStops[pick(std::size(kStops))]};
  request.stream = chance(mix.stream_fraction);
  request.kind = "plain";
  if (request.stream) {
    body["stream"] = true;
    request.kind = "stream";
    if (chance(mix.cancel_fraction)) {
      // Somewhere in the first events: past the headers, before most streams end.
      request.cancel_after_bytes = 1 + static_cast<int64_t>(pick(600));
      request.kind = "cancel";
    }
  }
  request.body = body.dump();
  return request;
}

}  // namespace specstack::cli
