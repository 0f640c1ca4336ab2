#include "specprefill/scorer.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>

#include "base/thread_pool.h"

namespace specstack {
namespace {

// Tokens per key tile: the tile is transposed to [head_dim, kTile] so the dot
// products vectorise across tokens with no horizontal sums.
constexpr int64_t kTile = 16;
// Query rows scored together against one tile (independent FMA chains).
constexpr int64_t kRowBlock = 4;
// Tokens pooled per pass of the tap loop (a stack buffer).
constexpr int64_t kPoolBlock = 256;
// Fewer multiply-adds than this per parallel share cost more in fork-join
// overhead than they gain.
constexpr int64_t kMinWorkPerShare = 1 << 16;

void run_parallel(ThreadPool* pool, int64_t n, int64_t work_per_item,
                  const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (pool == nullptr) {
    fn(0, n);
    return;
  }
  pool->parallel_for(
      n, std::max<int64_t>(1, kMinWorkPerShare / std::max<int64_t>(1, work_per_item)), fn);
}

// out[r * out_stride + j] = scale * (q[r] . key j) for R rows and the n_valid
// tokens of a transposed tile kt [head_dim, kTile].
template <int64_t R>
void tile_logits(const float* q, int64_t head_dim, const float* kt, float scale, float* out,
                 int64_t out_stride, int64_t n_valid) {
  float acc[R][kTile] = {};
  for (int64_t d = 0; d < head_dim; ++d) {
    const float* kd = kt + d * kTile;
    for (int64_t r = 0; r < R; ++r) {
      const float qv = q[r * head_dim + d];
#pragma omp simd
      for (int64_t j = 0; j < kTile; ++j) acc[r][j] += qv * kd[j];
    }
  }
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t j = 0; j < n_valid; ++j) out[r * out_stride + j] = acc[r][j] * scale;
  }
}

// e^x for x <= 0 (a logit minus its row's max), written so the softmax loop
// vectorises (std::exp is a library call per element). x = n ln2 + r with
// |r| <= ln2 / 2 (ln2 split in two so n ln2 is exact), e^r by its degree-7
// Taylor polynomial (truncation < 6e-9 relative), times 2^n built in the
// exponent bits. Within a few ulp of std::exp. Below -87 (and for NaN, which
// the caller detects separately) it returns 0: e^-87 < 2^-125 is negligible
// next to the row's e^0 = 1.
inline float exp_nonpositive(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693359375f;  // exact in 10 bits
  constexpr float kLn2Lo = -2.12194440e-4f;
  constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  // Selects, not branches, so the loop stays vectorisable; the clamp keeps
  // the int conversion below defined.
  const float xc = x >= -87.0f ? x : -87.0f;
  const float n = (xc * kLog2e + kRoundMagic) - kRoundMagic;
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float e = p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return x >= -87.0f ? e : 0.0f;
}

// Replaces a row of logits by exp(logit - max) and returns the sum of those,
// or NaN when a logit is NaN or infinite. The three passes are separate
// loops because GCC 12 does not vectorise them fused (mixed float/double
// reductions); a row stays in L2 across them.
double softmax_numerators(float* row, int64_t n) {
  float row_max = -std::numeric_limits<float>::infinity();
  float nonfinite = 0.0f;  // x - x is 0 for every finite x, NaN otherwise
#pragma omp simd reduction(max : row_max) reduction(+ : nonfinite)
  for (int64_t j = 0; j < n; ++j) {
    row_max = std::max(row_max, row[j]);
    nonfinite += row[j] - row[j];
  }
  for (int64_t j = 0; j < n; ++j) row[j] = exp_nonpositive(row[j] - row_max);
  // In double: M can be 100k+ and every term is positive.
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t j = 0; j < n; ++j) sum += row[j];
  return nonfinite == 0.0f ? sum : std::numeric_limits<double>::quiet_NaN();
}

Status check_shapes(const AttentionCapture& capture, const PromptKeys& keys,
                    const ScoreParams& params) {
  SS_TRY(capture.validate());
  if (keys.n_layers() != capture.n_layers) {
    return errorf("score: keys have {} layers, the capture {}", keys.n_layers(), capture.n_layers);
  }
  if (keys.head_dim() != capture.head_dim) {
    return errorf("score: keys have head_dim {}, the capture {}", keys.head_dim(),
                  capture.head_dim);
  }
  if (keys.n_kv_heads() <= 0 || capture.n_heads % keys.n_kv_heads() != 0) {
    return errorf("score: n_heads {} is not a multiple of n_kv_heads {}", capture.n_heads,
                  keys.n_kv_heads());
  }
  if (keys.n_tokens() <= 0) return errorf("score: no prompt tokens to score");
  if (params.pool_kernel < 1 || params.pool_kernel % 2 == 0) {
    return errorf("score: pool_kernel {} must be a positive odd number", params.pool_kernel);
  }
  for (int64_t l = 0; l < capture.n_layers; ++l) {
    if (!capture.is_sliding(l)) return Status::ok_status();
  }
  return errorf("score: all {} layers are sliding-window; nothing spans the whole prompt",
                capture.n_layers);
}

// Scratch for one (layer, kv head); reused across them.
struct UnitBuffers {
  std::vector<float> queries;   // [n_rows, head_dim], row = step * group + head in group
  std::vector<float> probs;     // [n_rows, pad + M + pad]: logits, then exp(logit - max)
  std::vector<float> inv_norm;  // [n_rows]: 1 / (sum of exp * pool_kernel)
};

}  // namespace

Result<std::vector<float>> score_tokens(const AttentionCapture& capture, const PromptKeys& keys,
                                        const ScoreParams& params) {
  SS_TRY(check_shapes(capture, keys, params));
  const int64_t n_tokens = keys.n_tokens();
  const int64_t n_steps = capture.n_steps;
  const int64_t head_dim = capture.head_dim;
  const int64_t group = capture.n_heads / keys.n_kv_heads();
  const int64_t n_rows = group * n_steps;
  const int64_t kernel = params.pool_kernel;
  const int64_t pad = kernel / 2;
  // Zero padding either side of each row is avg_pool1d's zero padding.
  const int64_t row_stride = n_tokens + 2 * pad;
  const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  const int64_t n_tiles = (n_tokens + kTile - 1) / kTile;

  UnitBuffers buf;
  buf.queries.resize(static_cast<size_t>(n_rows * head_dim));
  buf.probs.assign(static_cast<size_t>(n_rows * row_stride), 0.0f);
  buf.inv_norm.resize(static_cast<size_t>(n_rows));
  // max over (layer, head) of the pooled rows, per step: [n_steps, M].
  std::vector<float> step_max(static_cast<size_t>(n_steps * n_tokens), 0.0f);

  for (int64_t layer = 0; layer < capture.n_layers; ++layer) {
    if (capture.is_sliding(layer)) continue;
    for (int64_t kv_head = 0; kv_head < keys.n_kv_heads(); ++kv_head) {
      for (int64_t t = 0; t < n_steps; ++t) {
        for (int64_t i = 0; i < group; ++i) {
          const float* q = capture.query(layer, t) + (kv_head * group + i) * head_dim;
          std::copy(q, q + head_dim, buf.queries.begin() + (t * group + i) * head_dim);
        }
      }

      // Logits, a tile of keys at a time.
      run_parallel(
          params.pool, n_tiles, n_rows * head_dim * kTile, [&](int64_t begin, int64_t end) {
            std::vector<float> tile(static_cast<size_t>(kTile * head_dim));
            std::vector<float> kt(static_cast<size_t>(head_dim * kTile), 0.0f);
            for (int64_t tile_index = begin; tile_index < end; ++tile_index) {
              const int64_t first = tile_index * kTile;
              const int64_t n_valid = std::min(kTile, n_tokens - first);
              keys.copy_keys(layer, kv_head, first, first + n_valid, tile.data());
              for (int64_t j = 0; j < kTile; ++j) {
                for (int64_t d = 0; d < head_dim; ++d) {
                  kt[static_cast<size_t>(d * kTile + j)] =
                      j < n_valid ? tile[static_cast<size_t>(j * head_dim + d)] : 0.0f;
                }
              }
              float* out = buf.probs.data() + pad + first;
              int64_t r = 0;
              for (; r + kRowBlock <= n_rows; r += kRowBlock) {
                tile_logits<kRowBlock>(buf.queries.data() + r * head_dim, head_dim, kt.data(),
                                       scale, out + r * row_stride, row_stride, n_valid);
              }
              for (; r < n_rows; ++r) {
                tile_logits<1>(buf.queries.data() + r * head_dim, head_dim, kt.data(), scale,
                               out + r * row_stride, row_stride, n_valid);
              }
            }
          });

      // Softmax numerators and normalisers, a row at a time.
      run_parallel(params.pool, n_rows, 8 * n_tokens, [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) {
          const double sum = softmax_numerators(buf.probs.data() + r * row_stride + pad, n_tokens);
          buf.inv_norm[static_cast<size_t>(r)] =
              std::isfinite(sum) ? static_cast<float>(1.0 / (sum * static_cast<double>(kernel)))
                                 : std::numeric_limits<float>::quiet_NaN();
        }
      });
      for (int64_t r = 0; r < n_rows; ++r) {
        // Non-finite queries or keys (a broken draft) must not reach top-k;
        // std::max below would silently drop a NaN.
        if (!std::isfinite(buf.inv_norm[static_cast<size_t>(r)])) {
          return errorf("score: layer {} head {} step {} has non-finite attention logits", layer,
                        kv_head * group + r % group, r / group);
        }
      }

      // Pool each row (window sum times 1 / (sum * kernel)) and fold it into
      // the running max of its step.
      run_parallel(params.pool, n_tokens, n_rows * kernel, [&](int64_t begin, int64_t end) {
        float window[kPoolBlock];
        for (int64_t j0 = begin; j0 < end; j0 += kPoolBlock) {
          const int64_t n = std::min(kPoolBlock, end - j0);
          for (int64_t r = 0; r < n_rows; ++r) {
            // Padded index j is token j - pad, so token j's window starts at j.
            const float* p = buf.probs.data() + r * row_stride + j0;
            std::fill(window, window + n, 0.0f);
            for (int64_t k = 0; k < kernel; ++k) {
#pragma omp simd
              for (int64_t j = 0; j < n; ++j) window[j] += p[j + k];
            }
            const float s = buf.inv_norm[static_cast<size_t>(r)];
            float* best = step_max.data() + (r / group) * n_tokens + j0;
#pragma omp simd
            for (int64_t j = 0; j < n; ++j) best[j] = std::max(best[j], window[j] * s);
          }
        }
      });
    }
  }

  std::vector<float> importance(static_cast<size_t>(n_tokens), 0.0f);
  for (int64_t t = 0; t < n_steps; ++t) {
    const float* row = step_max.data() + t * n_tokens;
    for (int64_t j = 0; j < n_tokens; ++j) importance[static_cast<size_t>(j)] += row[j];
  }
  for (int64_t j = 0; j < n_tokens; ++j) {
    float& value = importance[static_cast<size_t>(j)];
    value /= static_cast<float>(n_steps);
    if (!std::isfinite(value)) {
      return errorf("score: importance of token {} is not finite ({})", j, value);
    }
  }
  return importance;
}

}  // namespace specstack
