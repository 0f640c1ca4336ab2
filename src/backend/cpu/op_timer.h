// OpTimer: adds a scope's wall time to an op's profile entry when profiling
// is on (one branch when off).
#pragma once

#include <chrono>

#include "backend/backend.h"

namespace specstack {

class OpTimer {
 public:
  OpTimer(bool enabled, OpProfile& profile, BackendOp op)
      : enabled_(enabled), profile_(profile), op_(static_cast<size_t>(op)) {
    if (enabled_) start_ = std::chrono::steady_clock::now();
  }
  ~OpTimer() {
    if (!enabled_) return;
    profile_.seconds[op_] +=
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    ++profile_.calls[op_];
  }
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

 private:
  bool enabled_;
  OpProfile& profile_;
  size_t op_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace specstack

// Inside a Backend method: times the rest of the scope as `op`.
#define SS_PROFILE(op) ::specstack::OpTimer ss_op_timer_(profiling_, profile_, ::specstack::BackendOp::op)
