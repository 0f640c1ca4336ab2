// Hopper (sm_90a) path of flash_attention() for head_dims 64 and 128: the same
// contract as flash_attention.h (FlashAttentionArgs, visibility, zeros for
// rows that see no key), computed with warpgroup MMAs (wgmma) like
// FlashAttention-3. flash_attention() dispatches here when
// flash_attention_hopper_supported() says so and keeps the FlashAttention-2
// kernel as the fallback for everything else.
#pragma once

#include <cuda_runtime.h>

#include "cuda/flash_attention.h"

namespace specstack::cuda {

// True when the wgmma kernel can run these args: the switch below is on,
// head_dim is 64 or 128, the pointers and strides allow 16-byte copies, and the
// current device is compute capability 9.0 with the kernel built for sm_90a
// (a build for plain sm_90 carries no wgmma code; this then says false).
bool flash_attention_hopper_supported(const FlashAttentionArgs& args);

// Requires flash_attention_hopper_supported(args).
void flash_attention_hopper(const FlashAttentionArgs& args, cudaStream_t stream);

// Process-wide switch, on by default, independent of the environment: tests
// turn it off to run the FlashAttention-2 kernel on the same inputs.
void set_flash_attention_hopper_enabled(bool enabled);
bool flash_attention_hopper_enabled();

}  // namespace specstack::cuda
