// The throughput model of a whole batch run, not one steady step: what
// `bench spec` measures is B requests decoding the same number of tokens,
// timed from the last request's first token to the last token. Plain
// requests all finish on the same step; speculative ones accept a random
// number of tokens per step, so the batch drains unevenly and the last
// steps run for the few requests still unfinished (each such step costs the
// target's weights again). The steady model (throughput_model.h) misses
// that tail and the one-off cost of the draft admitting the batch.
//
// Here per-request step counts are simulated from alpha and k (each draft
// token accepted independently with probability alpha, as the emulated
// benchmark draws them; k capped by the tokens a request has left), and
// each step is costed at the batch still running, interpolating the step
// costs linearly in the batch between batch 1 and batch B (the KV read
// grows with the batch, the weight read does not).
#pragma once

#include <cstdint>

#include "specdecode/throughput_model.h"

namespace specstack {

struct BatchRunInputs {
  int32_t batch = 1;               // B
  int32_t tokens_per_request = 1;  // decode tokens each request emits in the timed window
  double alpha = 0.8;              // acceptance probability per draft token
  int32_t k = 4;                   // draft tokens per step (before the per-request cap)
  SpecStepCosts at_batch;          // costs at B (overhead: per step, any batch)
  SpecStepCosts at_one;            // costs at batch 1 (target_step_seconds unused)
  // A step's first draft forward carries the catch-up rows (2 for a sequence
  // whose k drafts were all accepted, alpha^k of them): its cost at B and at
  // 1, or 0 for draft_step_seconds. The step's draft is first + (k - 1) D.
  double first_draft_at_batch = 0, first_draft_at_one = 0;
  double plain_step_seconds = 0;  // a plain engine step at B (every request emits one token)
  double admission_seconds = 0;   // one-off time in the spec run (the draft admitting the batch)
  int32_t trials = 200;           // simulated runs averaged
  uint64_t seed = 1;
};

struct BatchRunPrediction {
  double multiplier = 0;          // mean over trials of plain time / speculative time
  double mean_steps = 0;          // speculative steps per run (the slowest request's count)
  double mean_request_steps = 0;  // steps an average request needs
  double spec_seconds = 0;        // mean predicted speculative run time
  double plain_seconds = 0;       // plain run time: tokens_per_request x plain step
};

// The speculative step's cost at `running` of B sequences (linear in the batch).
double step_seconds_at(const BatchRunInputs& in, int32_t running);

BatchRunPrediction predict_batch_run(const BatchRunInputs& in);

}  // namespace specstack
