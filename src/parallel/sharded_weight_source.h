// ShardedWeightSource: one rank's view of a full checkpoint. build_weights asks
// it for each tensor in the rank's shape (from ShardPlan::rank_config); it asks
// the full source for the whole tensor and keeps only the rank's slice, so the
// full model is never held N times: a row slice of a mapped file stays a view
// of the mapping, anything else is copied out and the full tensor dropped at
// once (one full tensor alive at a time, not one model).
#pragma once

#include <string>
#include <vector>

#include "model/weights.h"
#include "parallel/shard_plan.h"

namespace specstack {

class ShardedWeightSource final : public WeightSource {
 public:
  ShardedWeightSource(WeightSource& full, const ShardPlan& plan, int64_t rank)
      : full_(full), plan_(plan), rank_(rank) {}

  bool has(const std::string& name) const override { return full_.has(name); }
  Result<Tensor> get(const std::string& name, const std::vector<int64_t>& shape,
                     bool is_norm) override;

 private:
  WeightSource& full_;
  const ShardPlan& plan_;
  int64_t rank_;
};

// Elements [begin, begin + count) of axis `axis` (0 or 1) of a host tensor, as
// a new tensor (axis 0 of a block-quantized tensor keeps whole rows; axis 1
// needs a plain float dtype).
Result<Tensor> copy_slice(const Tensor& full, int axis, int64_t begin, int64_t count);

}  // namespace specstack
