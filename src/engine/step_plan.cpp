#include "engine/step_plan.h"

namespace specstack {

int32_t StepPlan::add_token(int32_t token_id, int32_t position, int32_t seq, int32_t slot,
                            bool want_logits) {
  const auto row = static_cast<int32_t>(token_ids.size());
  token_ids.push_back(token_id);
  positions.push_back(position);
  seq_index.push_back(seq);
  slots.push_back(slot);
  if (want_logits) logit_rows.push_back(row);
  return row;
}

}  // namespace specstack
