#include "engine/specdecode_stage.h"

#include <algorithm>
#include <chrono>
#include <optional>
#include <span>

#include "specdecode/rejection_sampler.h"

namespace specstack {

struct SpecDecodeStage::DraftState {
  explicit DraftState(KvSequence sequence) : kv(std::move(sequence)) {}

  KvSequence kv;           // on the draft's pool; slots != tokens once the window drops blocks
  int32_t n_computed = 0;  // draft tokens (its view of the sequence) with draft KV
  bool admitted = false;   // kv has had its first allocation
  // The sequence holds a token past the draft's embedding table (a family
  // may pad its vocabularies differently: Qwen2.5-7B 152064, 0.5B 151936):
  // the draft cannot read it, so the sequence decodes without speculation.
  bool off_vocab = false;
  AcceptanceEstimate acceptance;
  // This step's round.
  bool open = false;
  int32_t k = 0;                      // draft tokens wanted this step
  int32_t base = 0;                   // n_computed after the catch-up (= draft length)
  std::vector<int32_t> proposed;      // [<= k] draft tokens
  std::vector<std::vector<float>> q;  // [proposed][draft vocab] (host sampling only)
  // Drawn on the device: draft token i's row is the draft's kept row
  // kept_base + i (-1: drawn on the host, q holds the distributions).
  int32_t kept_base = -1;
  std::optional<Sampler> sampler;  // the request's sampling on the draft side
  // The grammar cannot go on after the last proposed token (complete, or a
  // dead end): its state admits no bonus token.
  bool grammar_stop = false;
  uint64_t seed = 0;
  uint64_t round = 0;
};

namespace {

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// The draft side's RNG must be independent of the target's (which decides
// acceptance); splitmix64 of the request seed keeps seeded requests reproducible.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

int32_t argmax(const float* row, int64_t n) {
  return static_cast<int32_t>(std::max_element(row, row + n) - row);
}

}  // namespace

SpecDecodeStage::SpecDecodeStage(const SpecDecodeOptions& options, int32_t max_batched_tokens,
                                 const ModelConfig& target_config, size_t target_weight_bytes,
                                 const GrammarStage& grammar, bool device_verification)
    : options_(options),
      grammar_(grammar),
      // The device kernel reads draft rows no wider than the target's.
      device_verification_(device_verification && options.draft != nullptr &&
                           options.draft->config().vocab_size <= target_config.vocab_size),
      max_batched_tokens_(max_batched_tokens),
      draft_vocab_(options.draft->config().vocab_size),
      policy_(SpecLengthPolicyOptions{
          options.max_draft_tokens, options.adaptive,
          // Decode is weight-bound: a draft step costs about its share of weight bytes.
          target_weight_bytes == 0 ? 0.1
                                   : static_cast<double>(options.draft->model().weight_bytes()) /
                                         static_cast<double>(target_weight_bytes)}),
      emulation_rng_(options.emulation_seed) {
  SS_CHECK(options_.draft != nullptr);
  SS_CHECK_GE(options_.max_draft_tokens, 1);
}

SpecDecodeStage::~SpecDecodeStage() {
  for (auto& [seq, state] : states_) options_.draft->kv_manager().free(state->kv);
}

bool SpecDecodeStage::samples_on_device(const Sequence& seq) const {
  const RequestOptions& o = seq.request->options;
  return device_verification_ && options_.emulated_acceptance < 0 && !seq.sampler->greedy() &&
         !o.params.has_penalties() && !seq.grammar;
}

bool SpecDecodeStage::verified_on_device(Sequence* seq) const {
  auto it = states_.find(seq);
  return it != states_.end() && it->second->open && it->second->kept_base >= 0 && seq->n_draft > 0;
}

RowVerification SpecDecodeStage::verification(Sequence* seq, int32_t first_row) const {
  const DraftState& state = *states_.at(seq);
  SS_CHECK(state.open && state.kept_base >= 0);
  SS_CHECK_LE(seq->n_draft, static_cast<int32_t>(state.proposed.size()));
  RowVerification v;
  v.first_row = first_row;
  v.first_kept_row = state.kept_base;
  v.sampling = seq->sampler->device_rule();
  v.draft_tokens.assign(state.proposed.begin(), state.proposed.begin() + seq->n_draft);
  v.uniforms = seq->sampler->peek_uniforms(seq->n_draft + 1);
  return v;
}

bool SpecDecodeStage::speculates(const Request& request) const {
  return request.options.specdecode.enabled.value_or(options_.default_on);
}

int32_t SpecDecodeStage::draft_length(const Sequence& seq) {
  return static_cast<int32_t>(seq.request->options.prompt.size()) + seq.n_generated;
}

int32_t SpecDecodeStage::draft_token(const Sequence& seq, int32_t index) {
  const std::vector<int32_t>& prompt = seq.request->options.prompt;
  const auto n_prompt = static_cast<int32_t>(prompt.size());
  if (index < n_prompt) return prompt[static_cast<size_t>(index)];
  // Generated tokens end the target's list, before any draft tokens.
  const auto first_generated =
      static_cast<int32_t>(seq.tokens.size()) - seq.n_draft - seq.n_generated;
  return seq.tokens[static_cast<size_t>(first_generated + index - n_prompt)];
}

SpecDecodeStage::DraftState& SpecDecodeStage::state_of(Sequence* seq) {
  auto it = states_.find(seq);
  if (it == states_.end()) {
    // Publishable with a sparse window too: until its first dropped block
    // (drop_blocks ends publishing) its KV is the dense prompt's, so the
    // first catch-up chunk goes on the draft's prefix cache like a dense
    // draft's. Unpublished, a prompt whose draft blocks were evicted was
    // prefilled on the draft again by every later request that shares it
    // (bench spec at batch 32, 8K, H100: 13,886 draft tokens and 51.7 ms of
    // draft time per step, against 128 tokens and ~9 ms with hits).
    auto state = std::make_unique<DraftState>(
        options_.draft->kv_manager().new_sequence(KvSequenceOptions{0, /*publishable=*/true}));
    const SamplingParams& params = seq->request->options.params;
    state->seed = params.seed ? mix(*params.seed ^ mix(static_cast<uint64_t>(seq->choice) + 1))
                              : std::random_device{}();
    it = states_.emplace(seq, std::move(state)).first;
  }
  return *it->second;
}

void SpecDecodeStage::adopt(Sequence* seq, KvSequence draft_kv, int32_t n_prompt) {
  release(seq);
  DraftState& state = state_of(seq);
  options_.draft->kv_manager().free(state.kv);
  state.kv = std::move(draft_kv);
  state.n_computed = n_prompt;
  state.admitted = true;
  trim_window(state);
}

void SpecDecodeStage::release(Sequence* seq) {
  auto it = states_.find(seq);
  if (it == states_.end()) return;
  options_.draft->kv_manager().free(it->second->kv);
  states_.erase(it);
}

bool SpecDecodeStage::reserve_catch_up(Sequence* seq, DraftState& state, int32_t count,
                                       int32_t* first_slot) {
  KvManager& kv = options_.draft->kv_manager();
  if (!state.admitted) {
    const int32_t length = draft_length(*seq);
    std::vector<int32_t> tokens(static_cast<size_t>(length));
    for (int32_t i = 0; i < length; ++i) tokens[static_cast<size_t>(i)] = draft_token(*seq, i);
    // The draft's prefix cache holds prompts other requests (or speculative
    // prefill scoring) already ran through it. A sparse draft may start from
    // those dense blocks too: it drops the middle ones after its first step.
    const CachedPrefix prefix = kv.find_cached_prefix(tokens, 0);
    count = std::min(count, length - prefix.n_tokens);
    if (!kv.can_allocate(state.kv, prefix, count)) return false;
    *first_slot = kv.allocate(state.kv, prefix, count);
    state.n_computed = prefix.n_tokens;
    state.admitted = true;
    return true;
  }
  if (!kv.can_append(state.kv, count)) return false;
  *first_slot = kv.append(state.kv, count);
  return true;
}

void SpecDecodeStage::trim_window(DraftState& state) {
  if (options_.draft_window <= 0) return;
  KvManager& kv = options_.draft->kv_manager();
  const auto block_size = static_cast<int32_t>(kv.block_size());
  const int32_t n_sink_blocks = (options_.draft_sink + block_size - 1) / block_size;
  // The first block holding any of the last `window` slots starts the window.
  const int32_t first_window_block =
      std::max(0, state.kv.n_slots() - options_.draft_window) / block_size;
  const int32_t n_drop = first_window_block - n_sink_blocks;
  if (n_drop > 0) kv.drop_blocks(state.kv, n_sink_blocks, n_drop);
}

int32_t SpecDecodeStage::draft_sample(Sequence* seq, DraftState& state, const float* logits,
                                      int32_t greedy_id) {
  if (logits == nullptr) {  // the draft picked on its device (argmax, or a draw it kept the row of)
    if (state.sampler) state.sampler->record_output(greedy_id);
    return greedy_id;
  }
  grammar::TriggeredMatcher* grammar =
      seq->grammar_at_row(static_cast<int32_t>(seq->draft_grammar.size()));
  // Greedy without penalties or grammar: the draft's argmax, no state, no copy.
  if (!state.sampler && grammar == nullptr) return argmax(logits, draft_vocab_);
  std::vector<float> row(logits, logits + draft_vocab_);
  // A dead end (nothing admitted, the document may not end): no draft token.
  if (grammar != nullptr && !grammar_.mask(*seq, *grammar, row)) return -1;
  if (!state.sampler) return argmax(row.data(), draft_vocab_);
  Sampler& sampler = *state.sampler;
  if (sampler.greedy() || options_.emulated_acceptance >= 0) return sampler.sample(row);
  std::vector<float>& q = state.q.emplace_back();
  sampler.distribution(row, q);
  const int32_t token = sampler.draw(q);
  sampler.record_output(token);
  return token;
}

bool SpecDecodeStage::advance_grammar(Sequence& seq, DraftState& state) const {
  if (!seq.grammar) return true;
  grammar::TriggeredMatcher next =
      *seq.grammar_at_row(static_cast<int32_t>(seq.draft_grammar.size()));
  const GrammarOutcome outcome = grammar_.accept(seq, next, state.proposed.back());
  if (outcome == GrammarOutcome::kGrammarRejected) {
    // The draft's own pick on an unmasked device row (its state's mask was
    // not made yet), a dead end's (the masked argmax answers 0), or every
    // admitted draft logit was -inf: propose nothing from here. Whether the
    // state is a dead end is verify's question (no_bonus), when its mask is
    // made anyway.
    state.proposed.pop_back();
    if (state.q.size() > state.proposed.size()) state.q.pop_back();
    return false;
  }
  // Whether the new state admits anything is left to its mask, made while
  // the next draft forward runs (or by the target's verification): asking
  // here would put a mask lookup per draft token between the forwards
  // (H100, 64 x 1K json_schema: 12.5 ms of host time a step).
  seq.draft_grammar.push_back(std::move(next));
  state.grammar_stop = outcome == GrammarOutcome::kGrammarComplete;
  return !state.grammar_stop;
}

void SpecDecodeStage::fill_draft_masks(StepPlan& plan,
                                       const std::vector<std::pair<Sequence*, size_t>>& rows) {
  // Runs while the draft's forward does (StepPlan::fill_masks). Masks made
  // already (cached) first; then the others' walks while they still fit in
  // the forward's shadow: a walk is ~10-200 us for a JSON state, but ~1-2 ms
  // near a long string's minLength at a 152K vocabulary (H100, 1 x 1K
  // json_schema with minLength 1000: making every draft row's mask took
  // constrained speculation from 1.84x to 1.63x of plain). A row left
  // unmasked lets the draft pick its own argmax; advance_grammar stops the
  // drafting there if the grammar refuses it. Exact either way: the
  // verifier masks every row.
  const auto start = Clock::now();
  // 0.7: the rest of the forward's time goes to the lookups and the upload.
  const double budget = 0.7 * (draft_step_seconds_ > 0 ? draft_step_seconds_ : 5e-4);
  plan.masks.reset(plan.logit_rows.size(), draft_vocab_);
  std::vector<std::pair<Sequence*, size_t>> unknown;
  const auto keep = [&](MaskFill fill, size_t logit_row) {
    if (fill == MaskFill::kMaskNone || fill == MaskFill::kMaskUnknown)
      plan.masks.drop_last(logit_row);
  };
  for (const auto& [seq, logit_row] : rows) {
    grammar::TriggeredMatcher& state =
        *seq->grammar_at_row(static_cast<int32_t>(seq->draft_grammar.size()));
    const MaskFill fill = grammar_.fill_known_mask(*seq, state, plan.masks.add(logit_row));
    keep(fill, logit_row);
    if (fill == MaskFill::kMaskUnknown) unknown.emplace_back(seq, logit_row);
  }
  for (const auto& [seq, logit_row] : unknown) {
    if (seconds_since(start) >= budget) break;
    grammar::TriggeredMatcher& state =
        *seq->grammar_at_row(static_cast<int32_t>(seq->draft_grammar.size()));
    keep(grammar_.fill_mask(*seq, state, plan.masks.add(logit_row)), logit_row);
  }
}

SpecDecodeStage::ProposeStats SpecDecodeStage::propose(const std::vector<Sequence*>& running) {
  const auto propose_start = Clock::now();
  ModelInstance& draft = *options_.draft;
  // Who drafts this step: decoding (only the pending token left to compute),
  // not yet holding draft tokens, room for at least one more token. The
  // others that speculate (still prefilling, or recomputing after a
  // preemption) only catch up, so their draft is ready when they decode.
  std::vector<Sequence*> ready;
  std::vector<Sequence*> catching_up;
  std::vector<double> alphas;
  for (Sequence* seq : running) {
    if (seq->finished || !seq->admitted || seq->n_draft > 0 || !speculates(*seq->request)) continue;
    if (auto it = states_.find(seq); it != states_.end() && it->second->off_vocab) continue;
    if (seq->n_generated == 0 || seq->n_needed() != 1) {
      catching_up.push_back(seq);
      continue;
    }
    const int32_t room = seq->request->options.params.max_tokens - seq->n_generated - 1;
    if (room <= 0) continue;
    ready.push_back(seq);
    alphas.push_back(state_of(seq).acceptance.alpha());
  }
  const int32_t k = policy_.choose(alphas, static_cast<int32_t>(running.size() - ready.size()));
  if (k == 0) ready.clear();  // speculation would not pay this step: plain decode
  if (ready.empty() && catching_up.empty()) return {};

  // Forward 1: catch-up rows (chunked within the budget), drafting sequences
  // first; those that reach their last token get logits for draft token 1.
  KvManager& kv = draft.kv_manager();
  StepPlan plan;
  struct Row {
    Sequence* seq;
    DraftState* state;
    int32_t count;
    int32_t first_slot;
    bool drafts;             // reached the end: its last row gives draft token 1
    int32_t logit_row = -1;  // its draft-token-1 row in the first forward's output
    // On a draft that picks tokens: its rows come to the host all the same
    // (penalties, a grammar with sampling: the host's distribution).
    bool host_drawn = false;
  };
  std::vector<Row> rows;
  int32_t budget = max_batched_tokens_;
  int32_t n_admitted = 0;
  const auto add_catch_up = [&](Sequence* seq, bool wants_draft) {
    DraftState& state = state_of(seq);
    const int32_t length = draft_length(*seq);
    int32_t count = std::min(length - state.n_computed, budget);
    if (count <= 0) return;
    for (int32_t i = state.n_computed; i < length; ++i) {
      if (draft_token(*seq, i) >= draft_vocab_) {
        draft.kv_manager().free(state.kv);
        state.off_vocab = true;
        return;
      }
    }
    int32_t first_slot = 0;
    if (!state.admitted) ++n_admitted;
    if (!reserve_catch_up(seq, state, count, &first_slot)) {
      release(seq);  // the draft's pool is full: this one decodes plainly and retries later
      return;
    }
    count = std::min(length - state.n_computed, count);  // a prefix hit may cover more
    const bool drafts = wants_draft && state.n_computed + count == length;
    rows.push_back({seq, &state, count, first_slot, drafts});
    budget -= count;
  };
  for (Sequence* seq : ready) {
    if (budget > 0) add_catch_up(seq, true);
  }
  for (Sequence* seq : catching_up) {
    if (budget > 0) add_catch_up(seq, false);
  }
  // In steady decode every sequence catches up 1 row (a rejection: the
  // target's correction) or 2 (all k accepted: draft token k and the bonus).
  // Laid out as one sequence per row, each row wanting logits, the forward
  // has the decode shape a CUDA graph replays; with a 2-row sequence as one
  // run it went eager (H100, 0.5B draft, 32 x 16K sparse: this forward 2.80
  // -> 2.21 ms; at 64 x 8K its ~89 rows pad to the 128-row graph, which costs
  // what the eager run did). Two entries sharing a block table are the
  // same computation: the causal mask is by slot, and the earlier row's
  // entry sees its own slot and those before (seq_n_slots).
  const bool one_row_per_entry =
      std::all_of(rows.begin(), rows.end(), [](const Row& row) { return row.count <= 2; });
  int32_t n_logit_rows = 0;
  for (Row& row : rows) {
    DraftState& state = *row.state;
    const auto n_slots = static_cast<int32_t>(state.kv.n_slots());
    for (int32_t i = 0; i < row.count; ++i) {
      const int32_t index = state.n_computed + i;
      const bool last = i == row.count - 1;
      const bool wants_logits = one_row_per_entry || (row.drafts && last);
      if (one_row_per_entry || i == 0) {
        plan.block_tables.push_back(state.kv.blocks());
        plan.seq_n_slots.push_back(one_row_per_entry ? n_slots - (row.count - 1 - i) : n_slots);
      }
      const auto s = static_cast<int32_t>(plan.block_tables.size()) - 1;
      plan.add_token(draft_token(*row.seq, index), index, s, row.first_slot + i, wants_logits);
      if (wants_logits) {
        if (row.drafts && last) row.logit_row = n_logit_rows;
        ++n_logit_rows;
      }
    }
  }
  if (plan.n_tokens() == 0) return {};
  // Where the draft picks tokens, greedy rows take the argmax there
  // (emulated acceptance too: a greedy request's draft does so in real use,
  // so the benchmark must not pay a host sampler instead), sampled ones draw
  // there when the target verifies there too; the others are host rows.
  plan.tokens_on_device = draft.runner().picks_tokens();
  ProposeStats stats;
  stats.n_admitted = n_admitted;

  std::vector<Row*> drafting;  // sequences still proposing
  for (Row& row : rows) {
    DraftState& state = *row.state;
    if (!row.drafts) continue;
    const int32_t room = row.seq->request->options.params.max_tokens - row.seq->n_generated - 1;
    state.open = true;
    state.k = std::min(k, room);
    state.proposed.clear();
    state.q.clear();
    state.kept_base = -1;
    state.grammar_stop = false;
    row.seq->draft_grammar.clear();
    // The request's sampling on the draft side, with the same penalty state
    // as the target's. A greedy request without penalties drafts the argmax
    // and needs none, so its Sampler (seen-token list, vocab-sized mask) is
    // not copied every step (measured: no visible gain on the H100 at batch 32).
    const SamplingParams& p = row.seq->request->options.params;
    if (row.seq->sampler->greedy() && !p.has_penalties()) {
      state.sampler.reset();
    } else {
      // Without penalties the rule needs no history: a fresh Sampler, not a
      // copy of the request's with its vocab-sized scratch (H100, 7B / 0.5B
      // dummy, batch 64, T 0.8, fixed k 4: 2716 -> 2759 tok/s).
      if (p.has_penalties()) {
        state.sampler = *row.seq->sampler;
      } else {
        state.sampler.emplace(p, std::span<const int32_t>{});
      }
      state.sampler->reseed(mix(state.seed + state.round++));
    }
    drafting.push_back(&row);
  }

  // Sampled rows drawn on the device keep their logits there for the
  // target's verification: kept rows [kept_base, kept_base + k) a sequence.
  int32_t n_kept = 0;
  for (Row* row : drafting) {
    if (!plan.tokens_on_device || !samples_on_device(*row->seq)) continue;
    row->state->kept_base = n_kept;
    n_kept += row->state->k;
  }
  // logit_row of `step_plan` draws state's next draft token (on the device
  // when its rows are kept there).
  const auto draw_on_device = [](StepPlan& step_plan, size_t logit_row, DraftState& state) {
    if (state.kept_base < 0) return;
    if (step_plan.sampling.empty()) step_plan.sampling.assign(step_plan.logit_rows.size(), {});
    if (step_plan.keep_rows.empty()) step_plan.keep_rows.assign(step_plan.logit_rows.size(), -1);
    step_plan.sampling[logit_row] = state.sampler->device_draw();
    step_plan.keep_rows[logit_row] = state.kept_base + static_cast<int32_t>(state.proposed.size());
  };
  for (Row* row : drafting) {
    const SamplingParams& p = row->seq->request->options.params;
    row->host_drawn = plan.tokens_on_device && row->state->kept_base < 0 &&
                      !(p.temperature == 0.0f && !p.has_penalties());
    draw_on_device(plan, static_cast<size_t>(row->logit_row), *row->state);
    if (row->host_drawn) plan.host_rows.push_back(row->logit_row);  // ascending: plan order
  }

  // A draft that picks greedily on its device masks constrained rows there:
  // each drafting row's bitmask is its parser state after the tokens it has
  // proposed so far, made while the forward runs (as the target's, engine.cpp).
  const bool any_grammar = std::any_of(drafting.begin(), drafting.end(), [](const Row* row) {
    return row->seq->grammar.has_value();
  });
  for (int32_t step = 0;; ++step) {
    const auto start = Clock::now();
    if (step == 0)
      stats.setup_seconds = std::chrono::duration<double>(start - propose_start).count();
    std::vector<std::pair<Sequence*, size_t>> masked_rows;  // (sequence, its logit row)
    if (plan.tokens_on_device && any_grammar) {
      for (size_t r = 0; r < drafting.size(); ++r) {
        if (!drafting[r]->seq->grammar || drafting[r]->host_drawn) continue;
        masked_rows.emplace_back(drafting[r]->seq,
                                 step == 0 ? static_cast<size_t>(drafting[r]->logit_row) : r);
      }
      plan.fill_masks = [&plan, &masked_rows, this] { fill_draft_masks(plan, masked_rows); };
    }
    StepOutput output = draft.runner().run(plan);
    stats.forward_seconds += seconds_since(start);
    stats.n_tokens += static_cast<int32_t>(plan.n_tokens());
    ++stats.n_forwards;
    if (step == 0) stats.first_forward_seconds = seconds_since(start);
    // The cost line is of draft steps (one row per sequence): the first
    // forward also carries catch-up rows, prompt chunks among them, whose
    // cost per row is another matter.
    const double forward_seconds = seconds_since(start);
    if (step > 0) {
      // The fastest recent step: mask walks that overran a forward must not
      // raise their own budget.
      draft_step_seconds_ = draft_step_seconds_ > 0
                                ? std::min(draft_step_seconds_ * 1.02, forward_seconds)
                                : forward_seconds;
    }
    if (step == 0) {
      for (Row& row : rows) {
        row.state->n_computed += row.count;
        // Catch-up tokens are accepted ones: publish them on the draft's prefix cache.
        const auto n_full = static_cast<size_t>(row.state->n_computed / kv.block_size());
        if (row.state->kv.options().publishable && n_full > row.state->kv.block_hashes().size()) {
          std::vector<int32_t> tokens(static_cast<size_t>(row.state->n_computed));
          for (int32_t i = 0; i < row.state->n_computed; ++i)
            tokens[static_cast<size_t>(i)] = draft_token(*row.seq, i);
          kv.publish(row.state->kv, tokens);
        }
        row.state->base = row.state->n_computed;
        if (!row.drafts) trim_window(*row.state);
      }
    }
    // Logit rows are in plan order; after the first forward, one per drafting sequence.
    const auto sample_start = Clock::now();
    std::vector<Row*> next;
    int64_t host_row = 0;  // into output.logits, with tokens_on_device
    for (size_t r = 0; r < drafting.size(); ++r) {
      Row& row = *drafting[r];
      DraftState& state = *row.state;
      const auto logit_row =
          static_cast<size_t>(step == 0 ? row.logit_row : static_cast<int32_t>(r));
      const float* logits = nullptr;
      if (!plan.tokens_on_device) {
        logits = output.logits.f32() + static_cast<int64_t>(logit_row) * draft_vocab_;
      } else if (row.host_drawn) {
        logits = output.logits.f32() + host_row++ * draft_vocab_;
      }
      const int32_t greedy_id = plan.tokens_on_device ? output.picked_tokens[logit_row] : -1;
      const int32_t token = draft_sample(row.seq, state, logits, greedy_id);
      if (token < 0) {  // the grammar admits nothing here: no bonus either
        state.grammar_stop = true;
        continue;
      }
      state.proposed.push_back(token);
      if (!advance_grammar(*row.seq, state)) continue;  // the grammar stops it here
      if (static_cast<int32_t>(state.proposed.size()) < state.k) next.push_back(&row);
    }
    if (step > 0) {
      // The policy weighs what a draft step really costs the engine: with
      // host-sampled rows (a sampling request's draft distribution) that is
      // the forward plus downloading and sampling every row, which at a
      // large batch outweighs the forward many times.
      const double host_seconds =
          plan.tokens_on_device && plan.host_rows.empty() ? 0.0 : seconds_since(sample_start);
      policy_.observe_draft_step(static_cast<int32_t>(plan.n_tokens()),
                                 forward_seconds + host_seconds);
    }
    if (next.empty()) break;
    // Forward 2..k: each still-drafting sequence feeds its last draft token.
    StepPlan step_plan;
    step_plan.tokens_on_device = plan.tokens_on_device;
    std::vector<Row*> fed;
    for (Row* row : next) {
      DraftState& state = *row->state;
      if (!kv.can_append(state.kv, 1)) continue;  // stop early: fewer draft tokens
      const int32_t slot = kv.append(state.kv, 1);
      const auto s = static_cast<int32_t>(step_plan.block_tables.size());
      const int32_t index = state.base + static_cast<int32_t>(state.proposed.size()) - 1;
      step_plan.add_token(state.proposed.back(), index, s, slot, true);
      step_plan.block_tables.push_back(state.kv.blocks());
      step_plan.seq_n_slots.push_back(state.kv.n_slots());
      fed.push_back(row);
    }
    if (fed.empty()) break;
    for (size_t r = 0; r < fed.size(); ++r) {
      draw_on_device(step_plan, r, *fed[r]->state);
      if (fed[r]->host_drawn) step_plan.host_rows.push_back(static_cast<int32_t>(r));
    }
    plan = std::move(step_plan);
    drafting = std::move(fed);
  }

  for (Row& row : rows) {
    if (!row.drafts) continue;
    Sequence* seq = row.seq;
    for (int32_t token : row.state->proposed) seq->tokens.push_back(token);
    seq->n_draft = static_cast<int32_t>(row.state->proposed.size());
  }
  return stats;
}

void SpecDecodeStage::rollback_round(DraftState& state, int32_t n_accepted) {
  // The draft's KV holds the catch-up plus draft tokens 1..n-1 (the last one
  // was never fed); keep the accepted ones.
  const auto n_fed = static_cast<int32_t>(state.proposed.size()) - 1;
  const int32_t kept = std::min(n_accepted, std::max(n_fed, 0));
  const int32_t n_rejected = std::max(n_fed, 0) - kept;
  options_.draft->kv_manager().rollback(state.kv, n_rejected);
  state.n_computed = state.base + kept;
  state.open = false;
  state.proposed.clear();
  state.q.clear();
  state.kept_base = -1;
  state.sampler.reset();
  trim_window(state);
}

void SpecDecodeStage::end_step() {
  for (auto& [seq, state] : states_) {
    if (state->open) rollback_round(*state, 0);
  }
}

VerifyResult SpecDecodeStage::verify(Sequence* seq, const float* rows, const int32_t* greedy_ids,
                                     int64_t vocab, const VerifyOutcome* device_outcome) {
  DraftState& state = state_of(seq);
  SS_CHECK(state.open);
  Sampler& sampler = *seq->sampler;
  const int32_t k = seq->n_draft;
  const std::span<const int32_t> drafts(state.proposed.data(), static_cast<size_t>(k));
  VerifyResult result;
  result.n_drafted = k;
  // The last draft token left the grammar unable to go on (complete, or a
  // dead end): no token follows them if all are accepted (the scheduler may
  // have trimmed that one away). Its mask is made by now (the device plan's,
  // or host masking below), so asking costs no walk.
  // Asked only once all k are accepted.
  std::optional<bool> no_bonus_answer;
  const auto no_bonus = [&] {
    if (!no_bonus_answer) {
      no_bonus_answer = k == static_cast<int32_t>(state.proposed.size()) &&
                        (state.grammar_stop ||
                         (seq->grammar && !grammar_.any_admitted(*seq, *seq->grammar_at_row(k))));
    }
    return *no_bonus_answer;
  };
  const auto row = [&](int32_t i) { return rows + static_cast<int64_t>(i) * vocab; };
  // Row i as the target samples it: masked with the parser state after
  // draft tokens 0..i-1 (a constrained request; host rows only — on the
  // device the engine's plan masked them the same way).
  std::vector<float> copy;
  const auto target_logits = [&](int32_t i) -> std::vector<float>& {
    copy.assign(row(i), row(i) + vocab);
    grammar::TriggeredMatcher* grammar = seq->grammar_at_row(i);
    if (grammar != nullptr && !(i == k && no_bonus())) grammar_.mask(*seq, *grammar, copy);
    return copy;
  };

  if (options_.emulated_acceptance >= 0) {
    // Benchmarks only: Bernoulli(alpha) acceptance, the target's greedy token after.
    std::bernoulli_distribution accept(options_.emulated_acceptance);
    int32_t j = 0;
    while (j < k && accept(emulation_rng_)) ++j;
    for (int32_t i = 0; i < j; ++i) result.tokens.push_back(drafts[static_cast<size_t>(i)]);
    result.grammar_ended = j == k && no_bonus();
    if (!result.grammar_ended) {
      result.tokens.push_back(greedy_ids != nullptr ? greedy_ids[j]
                                                    : argmax(target_logits(j).data(), vocab));
    }
    for (int32_t token : result.tokens) sampler.record_output(token);
  } else if (device_outcome != nullptr) {  // verified where the target picks: no grammar
    SS_CHECK_GE(state.kept_base, 0);
    SS_CHECK(device_outcome->n_accepted >= 0 && device_outcome->n_accepted <= k);
    SS_CHECK(device_outcome->next_token >= 0 && device_outcome->next_token < vocab);
    result.tokens.assign(drafts.begin(), drafts.begin() + device_outcome->n_accepted);
    result.tokens.push_back(device_outcome->next_token);
    for (int32_t token : result.tokens) sampler.record_output(token);
    sampler.skip_uniforms(uniforms_used(*device_outcome, k));
  } else if (greedy_ids != nullptr) {  // device greedy: no penalties by construction
    const VerifyOutcome outcome =
        verify_greedy(drafts, std::span<const int32_t>(greedy_ids, static_cast<size_t>(k + 1)));
    result.tokens.assign(drafts.begin(), drafts.begin() + outcome.n_accepted);
    result.grammar_ended = outcome.n_accepted == k && no_bonus();
    if (!result.grammar_ended) result.tokens.push_back(outcome.next_token);
    for (int32_t token : result.tokens) sampler.record_output(token);
  } else if (sampler.greedy()) {
    // Row by row: each argmax sees the penalties of the tokens accepted before it.
    for (int32_t i = 0; i <= k; ++i) {
      if (i == k && no_bonus()) {
        result.grammar_ended = true;
        break;
      }
      const int32_t token = sampler.sample(target_logits(i));  // records it
      result.tokens.push_back(token);
      if (i == k || token != drafts[static_cast<size_t>(i)]) break;
    }
  } else {
    SS_CHECK_GE(state.q.size(), static_cast<size_t>(k));  // drawn on the host (kept_base < 0)
    std::vector<std::span<const float>> q(state.q.begin(), state.q.begin() + k);
    std::vector<float> p;
    const auto target_row = [&](int32_t i) -> std::span<const float> {
      if (i > 0) sampler.record_output(drafts[static_cast<size_t>(i - 1)]);  // accepted
      // Without a bonus the last row's draw is dropped: unmasked, it is a
      // valid distribution where the masked one may be empty.
      sampler.distribution(target_logits(i), p);
      return p;
    };
    const VerifyOutcome outcome =
        verify_stochastic(drafts, q, target_row, [&] { return sampler.uniform(); });
    result.tokens.assign(drafts.begin(), drafts.begin() + outcome.n_accepted);
    result.grammar_ended = outcome.n_accepted == k && no_bonus();
    if (!result.grammar_ended) {
      result.tokens.push_back(outcome.next_token);
      sampler.record_output(outcome.next_token);
    }
  }
  result.n_accepted = static_cast<int32_t>(result.tokens.size()) - (result.grammar_ended ? 0 : 1);
  if (seq->grammar && result.n_accepted > 0) {
    // The state after the accepted drafts is the one drafting kept.
    *seq->grammar = std::move(seq->draft_grammar[static_cast<size_t>(result.n_accepted - 1)]);
    result.n_grammar_advanced = result.n_accepted;
  }
  state.acceptance.observe(result.n_accepted, k);
  rollback_round(state, result.n_accepted);
  return result;
}

}  // namespace specstack
