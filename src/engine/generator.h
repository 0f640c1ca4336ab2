// Generator: offline generation for a fixed set of prompts on one model, used
// by `specstack generate`, the benchmarks and the tests. Prefill runs in
// chunks that may mix several sequences in one step; decode runs every live
// sequence in one step. (The serving scheduler replaces this with continuous
// batching; the StepPlans it builds are of the same kind.)
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "engine/engine_api.h"
#include "engine/model_runner.h"
#include "engine/sampling_params.h"
#include "kv/kv_manager.h"

namespace specstack {


struct GenerationRequest {
  std::vector<int32_t> prompt;        // token ids
  std::vector<int32_t> positions;     // optional explicit RoPE positions of the prompt (sparse prefill)
  SamplingParams params;
};

struct GenerationResult {
  std::vector<int32_t> tokens;  // generated ids (a stop token is included)
  FinishReason finish_reason = FinishReason::kFinishLength;
};

struct GenerationStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

struct GeneratorOptions {
  int32_t max_batched_tokens = 512;  // prefill tokens per step (chunked prefill)
};

// Called after each generated token; return false to stop that sequence.
using TokenCallback = std::function<bool(size_t request_index, int32_t token)>;

class Generator {
 public:
  Generator(ModelRunner& runner, KvManager& kv, const GeneratorOptions& options = {});

  // Errors when a prompt is empty or does not fit the KV pool / context.
  Result<std::vector<GenerationResult>> generate(const std::vector<GenerationRequest>& requests,
                                                 const TokenCallback& on_token = {},
                                                 GenerationStats* stats = nullptr);

 private:
  ModelRunner& runner_;
  KvManager& kv_;
  GeneratorOptions options_;
};

}  // namespace specstack
