#include "engine/generator.h"

#include <algorithm>
#include <chrono>

#include "engine/sampler.h"

namespace specstack {
namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct LiveSequence {
  size_t request_index;
  KvSequence kv;
  Sampler sampler;
  int32_t n_prefilled = 0;     // prompt tokens already in the KV cache
  int32_t next_position = 0;   // RoPE position of the next token fed
  int32_t pending_token = -1;  // sampled, not yet fed
  bool done = false;
};

}  // namespace

Generator::Generator(ModelRunner& runner, KvManager& kv, const GeneratorOptions& options)
    : runner_(runner), kv_(kv), options_(options) {}

Result<std::vector<GenerationResult>> Generator::generate(
    const std::vector<GenerationRequest>& requests, const TokenCallback& on_token,
    GenerationStats* stats) {
  const ModelConfig& config = runner_.model().config();
  const int64_t block_size = runner_.kv().shape().block_size;
  std::vector<GenerationResult> results(requests.size());
  std::vector<LiveSequence> live;
  int64_t blocks_needed = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const GenerationRequest& request = requests[i];
    if (request.prompt.empty()) return errorf("request {}: empty prompt", i);
    SS_TRY(request.params.validate());
    if (!request.positions.empty() && request.positions.size() != request.prompt.size()) {
      return errorf("request {}: {} positions for {} prompt tokens", i, request.positions.size(),
                    request.prompt.size());
    }
    for (int32_t id : request.prompt) {
      if (id < 0 || id >= config.vocab_size) {
        return errorf("request {}: token id {} out of range [0, {})", i, id, config.vocab_size);
      }
    }
    const int64_t total = static_cast<int64_t>(request.prompt.size()) + request.params.max_tokens;
    blocks_needed += (total + block_size - 1) / block_size;
    // Offline runs do not publish to the prefix cache: their prompts may carry
    // explicit (sparse) positions.
    live.push_back(LiveSequence{i, kv_.new_sequence(KvSequenceOptions{0, false}),
                                Sampler(request.params, request.prompt)});
  }
  // Offline generation reserves everything up front: no preemption here.
  if (blocks_needed > kv_.pool().n_free()) {
    return errorf("prompts + max_tokens need {} KV blocks but only {} are free", blocks_needed,
                  kv_.pool().n_free());
  }

  auto finish = [&](LiveSequence& seq, FinishReason reason) {
    seq.done = true;
    results[seq.request_index].finish_reason = reason;
    kv_.free(seq.kv);
  };
  auto accept = [&](LiveSequence& seq, int32_t token) {
    const GenerationRequest& request = requests[seq.request_index];
    results[seq.request_index].tokens.push_back(token);
    const bool keep_going = !on_token || on_token(seq.request_index, token);
    const bool eos = !request.params.ignore_eos &&
                     std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(), token) !=
                         config.eos_token_ids.end();
    const bool stop_id =
        std::find(request.params.stop_token_ids.begin(), request.params.stop_token_ids.end(),
                  token) != request.params.stop_token_ids.end();
    if (eos || stop_id || !keep_going) {
      finish(seq, FinishReason::kFinishStop);
    } else if (static_cast<int32_t>(results[seq.request_index].tokens.size()) >=
               request.params.max_tokens) {
      finish(seq, FinishReason::kFinishLength);
    } else {
      seq.pending_token = token;
    }
  };

  GenerationStats local_stats;
  const auto prefill_start = std::chrono::steady_clock::now();
  // Chunked prefill: fill each step up to max_batched_tokens across sequences.
  for (;;) {
    StepPlan plan;
    std::vector<LiveSequence*> in_plan;
    std::vector<bool> last_chunk;
    int32_t budget = options_.max_batched_tokens;
    for (LiveSequence& seq : live) {
      const GenerationRequest& request = requests[seq.request_index];
      const auto prompt_len = static_cast<int32_t>(request.prompt.size());
      if (seq.n_prefilled == prompt_len || budget == 0) continue;
      const int32_t chunk = std::min(budget, prompt_len - seq.n_prefilled);
      const int32_t first_slot = kv_.append(seq.kv, chunk);
      const auto s = static_cast<int32_t>(plan.block_tables.size());
      for (int32_t j = 0; j < chunk; ++j) {
        const int32_t index = seq.n_prefilled + j;
        const int32_t position = request.positions.empty() ? index : request.positions[index];
        plan.add_token(request.prompt[index], position, s, first_slot + j, index == prompt_len - 1);
      }
      plan.block_tables.push_back(seq.kv.blocks());
      plan.seq_n_slots.push_back(seq.kv.n_slots());
      seq.n_prefilled += chunk;
      budget -= chunk;
      in_plan.push_back(&seq);
      last_chunk.push_back(seq.n_prefilled == prompt_len);
    }
    if (in_plan.empty()) break;
    StepOutput output = runner_.run(plan);
    const int64_t vocab = output.logits.size(1);
    int64_t row = 0;
    for (size_t i = 0; i < in_plan.size(); ++i) {
      if (!last_chunk[i]) continue;
      LiveSequence& seq = *in_plan[i];
      const GenerationRequest& request = requests[seq.request_index];
      seq.next_position = (request.positions.empty() ? static_cast<int32_t>(request.prompt.size())
                                                     : request.positions.back() + 1);
      std::span<float> logits(output.logits.f32() + row * vocab, static_cast<size_t>(vocab));
      ++row;
      accept(seq, seq.sampler.sample(logits));
    }
    local_stats.prompt_tokens += plan.n_tokens();
  }
  local_stats.prefill_seconds = seconds_since(prefill_start);

  // Without penalties a GPU model picks (and samples) the tokens on the
  // device: each sampled row takes the uniform its own sampler would draw.
  bool on_device = runner_.picks_tokens();
  for (const GenerationRequest& request : requests) {
    const SamplingParams& p = request.params;
    on_device &= !p.has_penalties();
  }
  const auto decode_start = std::chrono::steady_clock::now();
  for (;;) {
    StepPlan plan;
    plan.tokens_on_device = on_device;
    std::vector<LiveSequence*> in_plan;
    for (LiveSequence& seq : live) {
      if (seq.done) continue;
      const int32_t slot = kv_.append(seq.kv, 1);
      const auto s = static_cast<int32_t>(plan.block_tables.size());
      plan.add_token(seq.pending_token, seq.next_position, s, slot, true);
      plan.block_tables.push_back(seq.kv.blocks());
      plan.seq_n_slots.push_back(seq.kv.n_slots());
      ++seq.next_position;
      in_plan.push_back(&seq);
      if (on_device) plan.sampling.push_back(seq.sampler.device_draw());
    }
    if (in_plan.empty()) break;
    StepOutput output = runner_.run(plan);
    if (on_device) {
      for (size_t i = 0; i < in_plan.size(); ++i) accept(*in_plan[i], output.picked_tokens[i]);
      continue;
    }
    const int64_t vocab = output.logits.size(1);
    for (size_t i = 0; i < in_plan.size(); ++i) {
      std::span<float> logits(output.logits.f32() + static_cast<int64_t>(i) * vocab,
                              static_cast<size_t>(vocab));
      accept(*in_plan[i], in_plan[i]->sampler.sample(logits));
    }
  }
  local_stats.decode_seconds = seconds_since(decode_start);
  for (LiveSequence& seq : live) {
    if (!seq.done) kv_.free(seq.kv);
  }
  // Counted from the results: the first token of each sequence came from prefill logits.
  local_stats.generated_tokens = 0;
  for (const auto& r : results)
    local_stats.generated_tokens += static_cast<int64_t>(r.tokens.size());
  if (stats != nullptr) *stats = local_stats;
  return results;
}

}  // namespace specstack
