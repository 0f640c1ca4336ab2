// What the token-picking tests on the CPU and the GPU share: many requests
// submitted at once (so they share steps) and gathered, and the law of their
// output as counts over cells, for chi-square homogeneity (chi_square.h).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/check.h"
#include "engine/engine.h"

namespace specstack::testing {

struct RequestOutput {
  std::vector<std::vector<int32_t>> tokens;         // [choice]
  std::vector<std::optional<FinishReason>> finish;  // [choice]
  std::vector<std::vector<TokenLogprob>> logprobs;  // [choice]
};

inline std::vector<RequestOutput> run_all(Engine& engine, std::vector<RequestOptions> requests) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<size_t> n_choices;
  for (RequestOptions& options : requests) {
    n_choices.push_back(static_cast<size_t>(options.n));
    auto stream = engine.submit(std::move(options));
    SS_CHECK_MSG(stream.ok(), stream.ok() ? "" : stream.message());
    streams.push_back(std::move(stream).value());
  }
  std::vector<RequestOutput> outputs(streams.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    RequestOutput& out = outputs[i];
    out.tokens.resize(n_choices[i]);
    out.finish.resize(n_choices[i]);
    out.logprobs.resize(n_choices[i]);
    while (!streams[i]->done()) {
      auto event = streams[i]->next(std::chrono::milliseconds(10000));
      if (!event) continue;
      const auto c = static_cast<size_t>(event->choice);
      out.tokens[c].insert(out.tokens[c].end(), event->tokens.begin(), event->tokens.end());
      out.logprobs[c].insert(out.logprobs[c].end(), event->logprobs.begin(), event->logprobs.end());
      if (event->finish) out.finish[c] = event->finish;
    }
  }
  return outputs;
}

// Counts [n_cells] of cell_of(tokens) over every choice of n_requests
// requests make(seed + r), run together on `engine`.
inline std::vector<int64_t> sample_cells(
    Engine& engine, const std::function<RequestOptions(uint64_t)>& make, int n_requests,
    uint64_t seed, const std::function<size_t(const std::vector<int32_t>&)>& cell_of,
    size_t n_cells) {
  std::vector<RequestOptions> requests;
  for (int r = 0; r < n_requests; ++r) requests.push_back(make(seed + static_cast<uint64_t>(r)));
  std::vector<int64_t> counts(n_cells, 0);
  for (const RequestOutput& out : run_all(engine, std::move(requests))) {
    for (const auto& tokens : out.tokens) {
      const size_t cell = cell_of(tokens);
      EXPECT_LT(cell, n_cells);
      if (cell < n_cells) ++counts[cell];
    }
  }
  return counts;
}

// A grammar whose three positions admit different characters, so each
// position's mask differs: its documents fall in 18 cells ("adf" .. "ceh"),
// anything else (a failure, also reported here) in cell 18.
inline constexpr const char* kThreePositionGrammar = "root ::= [abc] [de] [fgh]\n";
inline constexpr size_t kThreePositionCells = 19;
inline size_t three_position_cell(const std::string& text) {
  const bool valid = text.size() == 3 && text[0] >= 'a' && text[0] <= 'c' && text[1] >= 'd' &&
                     text[1] <= 'e' && text[2] >= 'f' && text[2] <= 'h';
  EXPECT_TRUE(valid) << text;
  if (!valid) return 18;
  return static_cast<size_t>((text[0] - 'a') * 6 + (text[1] - 'd') * 3 + (text[2] - 'f'));
}

// The `n` most likely first tokens after `probe`'s prompt (greedy, by its
// top logprobs), for first_two_cell.
inline std::vector<int32_t> most_likely_first_tokens(Engine& engine, RequestOptions probe,
                                                     int32_t n) {
  probe.params.temperature = 0.0f;
  probe.params.max_tokens = 1;
  probe.top_logprobs = n;
  // Held in a local: a range-for does not extend a temporary reached
  // through a member of another.
  const RequestOutput out = run_all(engine, {std::move(probe)})[0];
  std::vector<int32_t> top;
  for (const auto& [token, logprob] : out.logprobs.at(0).at(0).top) top.push_back(token);
  return top;
}

// The filters of the unconstrained law tests: all of them at once.
inline void set_law_filters(SamplingParams& params) {
  params.temperature = 1.0f;
  params.top_k = 30;
  params.top_p = 0.7f;
  params.min_p = 0.03f;
}

// Unconstrained two-token outputs: the first token's index in `top` (its
// size = "other") times the second token's parity: 2 * (top.size() + 1) cells.
inline size_t first_two_cell(const std::vector<int32_t>& top, const std::vector<int32_t>& tokens) {
  const auto first =
      static_cast<size_t>(std::find(top.begin(), top.end(), tokens.at(0)) - top.begin());
  return first * 2 + static_cast<size_t>(tokens.at(1) % 2);
}

}  // namespace specstack::testing
