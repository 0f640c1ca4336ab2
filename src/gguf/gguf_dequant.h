// Dequantization of GGUF tensor data to f32, exactly per the ggml block
// formats (ggml-common.h): F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (the
// fallbacks llama-quantize uses for rows that are not multiples of 256), Q4_K,
// Q5_K and Q6_K.
// Scales are multiplied in f32 in the same order as ggml's reference
// dequantize_row_* so the results are the values llama.cpp computes.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "gguf/gguf_file.h"
#include "tensor/tensor.h"

namespace specstack::gguf {

// n elements (a whole number of blocks of `type`) from src into dst. Errors
// for a type specstack cannot dequantize (naming it) or a partial block.
Status dequantize(uint32_t type, const uint8_t* src, int64_t n, float* dst);

// rows x row elements (row a whole number of blocks), split over threads.
Status dequantize_rows(uint32_t type, const uint8_t* src, int64_t rows, int64_t row, float* dst);

// The 6-bit scale and min of sub-block j (0..7) of the 12 packed scale bytes
// `q` of a Q4_K / Q5_K block (ggml's get_scale_min_k4); shared by the
// dequantizer and the CPU's quantized dot products.
void scale_min_k4(int j, const uint8_t* q, int& scale, int& min);

// An error naming the tensor and its type when specstack cannot dequantize it.
Status check_dequantizable(const TensorInfo& info);

// The whole tensor as a new f32 host tensor of info.shape() (row-major,
// [out, in] for a matrix).
Result<Tensor> dequantize_tensor(const GgufFile& file, const TensorInfo& info);

}  // namespace specstack::gguf
