// What the engine tests share: request parameters, gathering a request's
// stream, offline reference outputs, and the "every KV block returned" check.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <thread>
#include <vector>

#include "base/check.h"
#include "engine/engine.h"
#include "engine/generator.h"
#include "engine/model_instance.h"
#include "engine/sampling_params.h"

namespace specstack::testing {

// Greedy decoding of exactly max_tokens tokens (EOS ignored).
inline SamplingParams greedy(int32_t max_tokens) {
  SamplingParams params;
  params.temperature = 0;
  params.max_tokens = max_tokens;
  params.ignore_eos = true;
  return params;
}

// A request's events gathered per choice.
struct Collected {
  std::vector<std::vector<int32_t>> tokens;  // per choice
  std::vector<std::optional<FinishReason>> finish;
};

inline Collected collect(RequestStream& stream, int32_t n_choices) {
  Collected out;
  out.tokens.resize(static_cast<size_t>(n_choices));
  out.finish.resize(static_cast<size_t>(n_choices));
  while (!stream.done()) {
    auto event = stream.next(std::chrono::milliseconds(5000));
    if (!event) continue;
    auto& tokens = out.tokens[static_cast<size_t>(event->choice)];
    tokens.insert(tokens.end(), event->tokens.begin(), event->tokens.end());
    if (event->finish) out.finish[static_cast<size_t>(event->choice)] = event->finish;
  }
  return out;
}

// Each request generated alone, offline (no engine): the reference output
// the engine must reproduce under batching, preemption, prefix hits...
inline std::vector<std::vector<int32_t>> offline_outputs(
    ModelInstance& model, const std::vector<GenerationRequest>& requests) {
  Generator generator(model.runner(), model.kv_manager());
  std::vector<std::vector<int32_t>> out;
  for (const auto& request : requests) {
    auto result = generator.generate({request});
    SS_CHECK(result.ok());
    out.push_back((*result)[0].tokens);
  }
  return out;
}

// Nothing running or waiting and every block of the target's and the
// speculative-decoding draft's KV pools free. The loop frees a request's
// blocks right after pushing its last event, so this waits for that first.
inline void expect_engine_drained(const Engine& engine) {
  EngineMetrics m;
  for (int i = 0; i < 500; ++i) {
    m = engine.metrics();
    if (m.n_running == 0 && m.n_waiting == 0 && m.kv_blocks_free == m.kv_blocks_total &&
        m.draft_kv_blocks_free == m.draft_kv_blocks_total) {
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(m.n_running, 0);
  EXPECT_EQ(m.n_waiting, 0);
  EXPECT_EQ(m.kv_blocks_free, m.kv_blocks_total);
  EXPECT_EQ(m.draft_kv_blocks_free, m.draft_kv_blocks_total);
}

}  // namespace specstack::testing
