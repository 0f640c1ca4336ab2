#include "backend/backend.h"

namespace specstack {

const char* backend_op_name(BackendOp op) {
  switch (op) {
    case BackendOp::kOpEmbedding: return "embedding";
    case BackendOp::kOpMatmul: return "matmul";
    case BackendOp::kOpRmsnorm: return "rmsnorm";
    case BackendOp::kOpAdd: return "add";
    case BackendOp::kOpRope: return "rope";
    case BackendOp::kOpSiluMul: return "silu_mul";
    case BackendOp::kOpSoftmax: return "softmax";
    case BackendOp::kOpWriteKv: return "write_kv";
    case BackendOp::kOpAttention: return "attention";
    case BackendOp::kOpCount: break;
  }
  return "?";
}

double OpProfile::total_seconds() const {
  double total = 0;
  for (double s : seconds) total += s;
  return total;
}

}  // namespace specstack
