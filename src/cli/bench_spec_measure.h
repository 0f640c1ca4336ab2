// bench spec's measurements: one forward timed on the ModelRunner
// (ProbeStep) and B requests decoded by the serving Engine (run_decode),
// with where its steps' time goes and the draft's prefix-cache use.
#pragma once

#include <fmt/format.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "grammar/token_constraint.h"

namespace specstack::cli {

// A forward with `rows` fresh rows per sequence for `batch` sequences that
// already hold `context` KV slots (reserved, not computed: a step's time
// does not depend on the values). Decode-shaped steps (rows == 1) replay the
// GPU's graphs as the engine's do. Holds its KV until destroyed.
// Where a probe's sequences sit, to mimic an engine's (diagnostics): a
// sparse draft's rows sit at positions far past their slots, and its blocks
// inside what each prompt once held, spread over the pool.
struct ProbeLayout {
  int64_t position_offset = 0;  // positions = slot + this
  int64_t gap_tokens = 0;       // slots held (unused) between two sequences' blocks
};

class ProbeStep {
 public:
  ProbeStep(ModelInstance& m, int32_t batch, int64_t context, int32_t rows,
            const ProbeLayout& layout = {});
  ~ProbeStep();
  ProbeStep(const ProbeStep&) = delete;
  ProbeStep& operator=(const ProbeStep&) = delete;

  void run() { m_.runner().run(plan_); }
  // Median seconds of `repeats` runs after one warm-up; `before` (untimed)
  // runs ahead of each, e.g. another model's step as in the engine's loop.
  double time(int32_t repeats, const std::function<void()>& before = {});

 private:
  ModelInstance& m_;
  std::vector<KvSequence> seqs_;
  std::vector<KvSequence> gaps_;
  StepPlan plan_;
};

// Seconds of one such forward (median of `repeats`), its KV freed after.
double time_step(ModelInstance& m, int32_t batch, int64_t context, int32_t rows, int32_t repeats);

// Mean milliseconds of the engine's steady decode steps (every sequence
// emitting, no prompt rows): where a step's time goes, and the loop's own
// time between steps.
struct StepBreakdown {
  double step = 0, draft = 0, schedule = 0, forward = 0, rest = 0, gap = 0;
  double draft_first = 0;     // of draft: the first (catch-up) draft forward
  double draft_forwards = 0;  // of draft: all its forwards; draft minus this is host work
  double draft_setup = 0;     // of the host work: before the first draft forward
  double draft_tokens = 0;    // tokens the draft forwarded per step (k per sequence when caught up)
  int n_steps = 0;
  // Not in the means: the steps in which the draft admitted sequences (whole
  // decode-shaped steps only), their time beyond a mean steady step (ms in
  // all), and every step in which some sequence emitted (the drain included).
  double admission_excess = 0;
  int n_decode_steps = 0;
  std::string str() const {
    return fmt::format(
        "{:.2f} = {:.2f} ({:.2f} first, {:.2f} host: {:.2f} setup) + {:.2f} + {:.2f} + {:.2f} "
        "(+{:.2f}) [{} steps, draft {:.1f} tok]",
        step + gap, draft, draft_first, draft - draft_forwards, draft_setup, schedule, forward,
        rest, gap, n_steps, draft_tokens);
  }
};

struct DecodeRun {
  StepBreakdown steps;
  double tokens_per_second = 0;
  double step_seconds = 0;  // decode time per engine step (plain: per token of each sequence)
  int64_t drafted = 0, accepted = 0, verifications = 0;
  // The draft's prefix cache over the run: a miss means the draft prefills
  // that part of the prompt again, inside the engine's steps.
  int64_t draft_query_tokens = 0, draft_hit_tokens = 0, draft_evictions = 0;
};

// B requests decoding `gen` tokens; throughput counts the tokens that arrive
// after the last request got its first one (every prefill is done then).
// With a constraint every request is constrained by it (--json-schema).
Result<DecodeRun> run_decode(ModelInstance& target, EngineOptions options,
                             const std::vector<std::vector<int32_t>>& prompts, int32_t gen,
                             std::shared_ptr<grammar::TokenConstraint> constraint = nullptr);

// The constraint of a JSON schema file over a tokenizer's vocabulary,
// compiled as the server's GrammarCache does (reachable tops classified).
Result<std::shared_ptr<grammar::TokenConstraint>> load_schema_constraint(
    const std::string& schema_path, const std::string& tokenizer_dir);

}  // namespace specstack::cli
