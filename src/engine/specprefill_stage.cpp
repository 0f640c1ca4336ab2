#include "engine/specprefill_stage.h"

#include <algorithm>
#include <cstdlib>
#include <string_view>

#include "specprefill/prompt_keys.h"
#include "specprefill/scorer.h"
#include "specprefill/selector.h"

namespace specstack {

struct SpecPrefillStage::Job {
  Job(Request* r, KvSequence sequence) : request(r), kv(std::move(sequence)) {}

  Request* request;
  KvSequence kv;              // on the draft's KV pool
  int32_t prefix_tokens = 0;  // P: target prefix-cache hit; only [P, M) is scored
  double keep_pct = 0.2;
  bool keep_draft_kv = false;
  bool admitted = false;
  int32_t n_computed = 0;   // draft prompt tokens with KV
  int32_t n_steps = 0;      // captured query steps so far
  int32_t next_token = -1;  // greedy draft token to feed next (lookahead)
  bool done = false;
  AttentionCapture capture;
  Clock::time_point start;
  Clock::time_point prefill_done;   // the draft's prompt KV is complete (lookahead starts)
  double lookahead_forward_ms = 0;  // of the lookahead, time inside the draft's forwards
  std::span<const int32_t> prompt() const { return request->options.prompt; }
};

SpecPrefillStage::SpecPrefillStage(const SpecPrefillOptions& options, int32_t max_batched_tokens,
                                   int64_t target_sliding_window)
    : options_(options),
      max_batched_tokens_(max_batched_tokens),
      target_sliding_window_(target_sliding_window) {
  SS_CHECK(options_.draft != nullptr);
  if (const char* follow = std::getenv("SPECSTACK_LOOKAHEAD_FOLLOW"); follow != nullptr) {
    options_.follow_steps = std::string_view(follow) != "0";
  }
}

int32_t SpecPrefillStage::add_follow_steps(StepPlan& plan, std::span<const Row> rows) {
  // The rows that carry a capture go on for as many steps as the job with
  // the fewest left still needs, each with its slots allocated now.
  int32_t follow = options_.lookahead;
  for (const Row& row : rows) {
    if (row.last_row) follow = std::min(follow, options_.lookahead - row.job->n_steps - 1);
  }
  if (follow <= 0) return 0;
  KvManager& kv = options_.draft->kv_manager();
  for (size_t s = 0; s < rows.size(); ++s) {
    if (!rows[s].last_row) continue;
    if (!kv.can_append(rows[s].job->kv, follow)) {  // single steps then: undo the others
      for (size_t t = 0; t < s; ++t) {
        if (rows[t].last_row) kv.rollback(rows[t].job->kv, follow);
      }
      return 0;
    }
    kv.append(rows[s].job->kv, follow);
  }
  for (size_t s = 0; s < rows.size(); ++s) {
    if (rows[s].last_row) plan.block_tables[s] = rows[s].job->kv.blocks();
  }
  plan.follow_steps = follow;
  return follow;
}

SpecPrefillStage::~SpecPrefillStage() {
  for (auto& job : jobs_) options_.draft->kv_manager().free(job->kv);
}

void SpecPrefillStage::add(Request* request, int32_t prefix_tokens, double keep_pct,
                           bool keep_draft_kv) {
  ModelInstance& draft = *options_.draft;
  auto job = std::make_unique<Job>(request, draft.kv_manager().new_sequence());
  job->prefix_tokens = prefix_tokens;
  job->keep_pct = keep_pct;
  job->keep_draft_kv = keep_draft_kv;
  const ModelConfig& config = draft.config();
  job->capture =
      AttentionCapture::zeros(config.n_layers, options_.lookahead, config.n_heads, config.head_dim);
  job->capture.layer_window.resize(static_cast<size_t>(config.n_layers));
  for (int64_t l = 0; l < config.n_layers; ++l) {
    job->capture.layer_window[static_cast<size_t>(l)] =
        config.layer_is_sliding(l) ? config.sliding_window : 0;
  }
  job->start = Clock::now();
  job->prefill_done = job->start;  // moved on when the draft's prompt KV completes
  jobs_.push_back(std::move(job));
}

void SpecPrefillStage::remove(Request* request) {
  for (auto& job : jobs_) {
    if (job->request == request) options_.draft->kv_manager().free(job->kv);
  }
  jobs_.erase(std::remove_if(jobs_.begin(), jobs_.end(),
                             [&](const auto& job) { return job->request == request; }),
              jobs_.end());
}

SpecPrefillOutcome SpecPrefillStage::fallback(Job& job, std::string reason) {
  options_.draft->kv_manager().free(job.kv);
  job.done = true;
  SpecPrefillOutcome outcome;
  outcome.request = job.request;
  outcome.stats.prompt_tokens = static_cast<int64_t>(job.prompt().size()) - job.prefix_tokens;
  outcome.stats.scoring_ms =
      std::chrono::duration<double, std::milli>(Clock::now() - job.start).count();
  outcome.stats.fallback_reason = std::move(reason);
  return outcome;
}

SpecPrefillOutcome SpecPrefillStage::finish_job(Job& job) {
  ModelInstance& draft = *options_.draft;
  const auto m = static_cast<int32_t>(job.prompt().size());
  const int32_t p = job.prefix_tokens;
  job.capture.keep_first_steps(job.n_steps);  // fewer steps when the draft hit EOS
  if (options_.inject_fault == "scoring") return fallback(job, "scoring failed (injected fault)");
  const Clock::time_point score_start = Clock::now();
  // The lookahead tokens' own keys are excluded: only prompt slots [P, M) are scored.
  Result<std::vector<float>> importance = std::vector<float>();
  if (draft.device_scorer()) {  // GPU: the keys never leave the device
    importance = draft.device_scorer()(job.capture, job.kv.blocks(), p, m, options_.pool_kernel);
  } else {
    auto keys = PagedPromptKeys::make(draft.kv(), job.kv.blocks(), p, m);
    if (!keys.ok()) return fallback(job, "scoring failed: " + keys.message());
    importance =
        score_tokens(job.capture, *keys, ScoreParams{options_.pool_kernel, &scoring_pool_});
  }
  if (!importance.ok()) return fallback(job, "scoring failed: " + importance.message());
  SelectionOptions select;
  select.keep_pct = job.keep_pct;
  select.chunk = options_.chunk;
  select.force_first_last = true;  // the last prompt token's logits start decoding
  select.force_recent_window = std::max<int64_t>(job.capture.max_window(), target_sliding_window_);
  select.position_offset = p;
  auto selection = select_chunks(*importance, select);
  if (!selection.ok()) return fallback(job, "selection failed: " + selection.message());

  SpecPrefillOutcome outcome;
  outcome.request = job.request;
  outcome.applied = true;
  outcome.prefix_tokens = p;
  for (int32_t i = 0; i < p; ++i) {
    outcome.tokens.push_back(job.prompt()[static_cast<size_t>(i)]);
    outcome.positions.push_back(i);
  }
  for (int32_t position : selection->kept_positions) {
    outcome.tokens.push_back(job.prompt()[static_cast<size_t>(position)]);
    outcome.positions.push_back(position);
  }
  SS_CHECK_EQ(outcome.positions.back(), m - 1);
  outcome.stats.applied = true;
  outcome.stats.prompt_tokens = m - p;
  outcome.stats.kept_tokens = static_cast<int64_t>(selection->kept_positions.size());
  const Clock::time_point now = Clock::now();
  auto ms = [](Clock::time_point from, Clock::time_point to) {
    return std::chrono::duration<double, std::milli>(to - from).count();
  };
  outcome.stats.scoring_ms = ms(job.start, now);
  outcome.stats.draft_prefill_ms = ms(job.start, job.prefill_done);
  outcome.stats.lookahead_ms = ms(job.prefill_done, score_start);
  outcome.stats.lookahead_forward_ms = job.lookahead_forward_ms;
  outcome.stats.score_ms = ms(score_start, now);
  auto chosen = std::make_shared<SpecPrefillSelection>();
  chosen->chunk = options_.chunk;
  chosen->first_position = p;
  chosen->chunk_scores = std::move(selection->chunk_scores);
  chosen->kept_chunks = std::move(selection->kept_chunks);
  outcome.stats.selection = std::move(chosen);
  // The lookahead tokens' KV never serves decoding. The prompt's KV goes on
  // to speculative decoding when asked for, else it is freed.
  if (job.keep_draft_kv) {
    draft.kv_manager().rollback(job.kv, job.kv.n_slots() - m);
    outcome.draft_kv.emplace(std::move(job.kv));
    job.kv = draft.kv_manager().new_sequence();
  } else {
    draft.kv_manager().free(job.kv);
  }
  job.done = true;
  return outcome;
}

std::vector<SpecPrefillOutcome> SpecPrefillStage::step(bool run_ahead) {
  std::vector<SpecPrefillOutcome> outcomes;
  if (jobs_.empty()) return outcomes;
  ModelInstance& draft = *options_.draft;
  KvManager& kv = draft.kv_manager();
  StepPlan plan;
  std::vector<Row> rows;
  int32_t budget = max_batched_tokens_;
  for (auto& owned : jobs_) {
    Job& job = *owned;
    if (budget == 0) break;
    const auto m = static_cast<int32_t>(job.prompt().size());
    int32_t first_slot = 0;
    int32_t count = 0;
    if (job.n_computed < m) {  // draft prefill, chunked
      if (options_.inject_fault == "draft_kv") {
        outcomes.push_back(fallback(job, "draft KV cache exhausted (injected fault)"));
        continue;
      }
      if (!job.admitted) {
        // Same tokenizer, but the draft's embedding may be padded less than
        // the target's (Qwen2.5: 151936 vs 152064 rows): an id past it cannot
        // be scored.
        const int64_t draft_vocab = draft.config().vocab_size;
        if (std::any_of(job.prompt().begin(), job.prompt().end(),
                        [&](int32_t id) { return id >= draft_vocab; })) {
          outcomes.push_back(fallback(job, "a prompt token is outside the draft's vocabulary"));
          continue;
        }
        CachedPrefix prefix = kv.find_cached_prefix(job.prompt(), 0);
        count = std::min(m - prefix.n_tokens, budget);
        if (!kv.can_allocate(job.kv, prefix, count)) {
          outcomes.push_back(fallback(job, "draft KV cache exhausted"));
          continue;
        }
        first_slot = kv.allocate(job.kv, prefix, count);
        job.n_computed = prefix.n_tokens;
        job.admitted = true;
      } else {
        count = std::min(m - job.n_computed, budget);
        if (!kv.can_append(job.kv, count)) {
          outcomes.push_back(fallback(job, "draft KV cache exhausted"));
          continue;
        }
        first_slot = kv.append(job.kv, count);
      }
      const bool reaches_end = job.n_computed + count == m;
      const auto s = static_cast<int32_t>(plan.block_tables.size());
      for (int32_t i = 0; i < count; ++i) {
        const int32_t index = job.n_computed + i;
        const int32_t row = plan.add_token(job.prompt()[static_cast<size_t>(index)], index, s,
                                           first_slot + i, reaches_end && i == count - 1);
        if (reaches_end && i == count - 1) plan.capture_rows.push_back(row);
      }
      rows.push_back({&job, count, reaches_end});
    } else {  // lookahead: feed the last greedy draft token at position M + step - 1
      if (!kv.can_append(job.kv, 1)) {
        outcomes.push_back(fallback(job, "draft KV cache exhausted"));
        continue;
      }
      first_slot = kv.append(job.kv, 1);
      count = 1;
      const auto s = static_cast<int32_t>(plan.block_tables.size());
      const int32_t row = plan.add_token(job.next_token, m + job.n_steps - 1, s, first_slot, true);
      plan.capture_rows.push_back(row);
      rows.push_back({&job, 1, true});
    }
    plan.block_tables.push_back(job.kv.blocks());
    plan.seq_n_slots.push_back(job.kv.n_slots());
    budget -= count;
  }

  if (plan.n_tokens() > 0) {
    // Only the greedy next token of each captured row is needed: the model
    // takes the argmax itself (on the GPU no logits row crosses PCIe).
    plan.tokens_on_device = true;
    if (run_ahead && options_.follow_steps && !plan.capture_rows.empty()) {
      add_follow_steps(plan, rows);
    }
    const Clock::time_point forward_start = Clock::now();
    StepOutput output = draft.runner().run(plan);
    const Clock::time_point forward_end = Clock::now();
    const double forward_ms =
        std::chrono::duration<double, std::milli>(forward_end - forward_start).count();
    const ModelConfig& config = draft.config();
    const int64_t q_width = config.n_heads * config.head_dim;
    // Captured rows: step 0's, then each follow step's in the same order.
    const auto n_captured = static_cast<int64_t>(plan.capture_rows.size());
    int64_t captured = 0;
    for (const Row& row : rows) {
      Job& job = *row.job;
      const auto m = static_cast<int32_t>(job.prompt().size());
      if (job.n_computed == m) job.lookahead_forward_ms += forward_ms;
      if (job.n_computed < m) {
        job.n_computed += row.count;
        kv.publish(job.kv, job.prompt().subspan(0, static_cast<size_t>(job.n_computed)));
        if (job.n_computed == m) {  // the follow steps, if any, were lookahead
          job.prefill_done =
              forward_end - std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double, std::milli>(output.follow_ms));
          job.lookahead_forward_ms += output.follow_ms;
        }
      }
      if (!row.last_row) continue;
      // A job past its last step (EOS, or fewer follow steps left than the
      // plan ran) ignores the rest; finish_job rolls its slots back.
      for (int64_t j = 0; j <= plan.follow_steps && !job.done; ++j) {
        const int64_t index = j * n_captured + captured;
        for (int64_t l = 0; l < config.n_layers; ++l) {
          std::copy_n(output.captured_queries.f32() + (index * config.n_layers + l) * q_width,
                      q_width, job.capture.query(l, job.n_steps));
        }
        job.next_token = output.picked_tokens[static_cast<size_t>(index)];
        ++job.n_steps;
        const bool eos = std::find(config.eos_token_ids.begin(), config.eos_token_ids.end(),
                                   job.next_token) != config.eos_token_ids.end();
        if (job.n_steps == options_.lookahead || eos) outcomes.push_back(finish_job(job));
      }
      ++captured;
    }
  }
  jobs_.erase(std::remove_if(jobs_.begin(), jobs_.end(), [](const auto& job) { return job->done; }),
              jobs_.end());
  return outcomes;
}

}  // namespace specstack
