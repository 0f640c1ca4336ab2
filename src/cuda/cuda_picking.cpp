// CudaModel's token picking, after a forward: the sampling kernel per logit
// row (its inputs, grammar masks among them, staged in one upload), the
// picked tokens' logprobs, a draft's kept rows and a target's speculative
// verifications (cuda/verification.h); only ids, logprobs, outcomes and the
// host rows' logits come down.
#include <algorithm>
#include <cstring>

#include "cuda/cuda_model_internal.h"
#include "cuda/logprobs.h"
#include "cuda/sampling.h"
#include "cuda/verification.h"

namespace specstack::cuda {

void CudaModel::finish_step(const ForwardBatch& batch, int32_t n_rows, Tensor& logits) {
  const int64_t vocab = config_.vocab_size;
  const size_t row_bytes = size_t(vocab) * sizeof(float);
  device_picks_ = batch.picked_tokens == nullptr ? -1 : n_rows;
  if (batch.picked_tokens == nullptr) {
    logits = Tensor::zeros(DType::kF32, {n_rows, vocab});
    const size_t logit_bytes = size_t(n_rows) * row_bytes;
    grow_pinned(reinterpret_cast<void**>(&logits_host_), &logits_host_capacity_, logit_bytes);
    if (logit_bytes > 0) {
      SS_CUDA_CHECK(cudaMemcpyAsync(logits_host_, logits_.data(), logit_bytes,
                                    cudaMemcpyDeviceToHost, stream_));
    }
    SS_CUDA_CHECK(cudaStreamSynchronize(stream_));
    if (logit_bytes > 0) std::memcpy(logits.f32(), logits_host_, logit_bytes);
    return;
  }
  // The model picks every row's token: sampling parameters and grammar masks
  // go up (a few KB a row), the kernel reads masked tokens as -inf; only the
  // host rows' logits come down. The forward is queued: the host makes the
  // masks while the GPU runs it.
  batch.picked_tokens->resize(size_t(n_rows));
  const size_t n_host = batch.host_rows.size();
  if (n_rows > 0) {
    if (batch.prepare_masks != nullptr) (*batch.prepare_masks)();
    const PickInputs in = upload_pick_inputs(batch, n_rows);
    pick_tokens(n_rows, in);
    if (!batch.keep_rows.empty()) keep_rows(batch, n_rows, in);
    // Verifications re-pick their rows (the emitted tokens) before the
    // picks come down and logprobs are taken of them.
    if (!batch.verifications.empty()) queue_verifications(batch);
    SS_CUDA_CHECK(cudaMemcpyAsync(batch.picked_tokens->data(), picked_ids_.data(),
                                  size_t(n_rows) * sizeof(int32_t), cudaMemcpyDeviceToHost,
                                  stream_));
    if (in.max_top_logprobs >= 0) queue_logprobs(n_rows, in);
    grow_pinned(reinterpret_cast<void**>(&logits_host_), &logits_host_capacity_,
                n_host * row_bytes);
    // Runs of consecutive host rows in one copy each.
    for (size_t i = 0; i < n_host;) {
      size_t j = i + 1;
      while (j < n_host && batch.host_rows[j] == batch.host_rows[j - 1] + 1) ++j;
      SS_CHECK_LT(batch.host_rows[j - 1], n_rows);
      SS_CUDA_CHECK(cudaMemcpyAsync(logits_host_ + i * size_t(vocab),
                                    logits_.data() + size_t(batch.host_rows[i]) * size_t(vocab),
                                    (j - i) * row_bytes, cudaMemcpyDeviceToHost, stream_));
      i = j;
    }
  }
  SS_CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (n_rows > 0 && batch.logprobs != nullptr && !batch.top_logprobs.empty()) {
    collect_logprobs(batch, n_rows);
  }
  if (n_rows > 0 && !batch.verifications.empty()) collect_verifications(batch);
  logits = Tensor();
  if (n_host > 0) {
    logits = Tensor::zeros(DType::kF32, {static_cast<int64_t>(n_host), vocab});
    std::memcpy(logits.f32(), logits_host_, n_host * row_bytes);
  }
}

void CudaModel::pick_tokens(int32_t n_rows, const PickInputs& in) {
  const auto vocab = static_cast<int32_t>(config_.vocab_size);
  picked_ids_.reserve(size_t(n_rows));
  // All greedy: many CTAs a row (one CTA reads a 150K-vocab row in ~15 us on
  // an H100: docs/benchmarks.md "session 42").
  if (in.all_greedy && n_rows <= kGreedyTokensMaxRows) {
    greedy_keys_.reserve(greedy_workspace_words(n_rows, vocab));
    greedy_tokens(logits_.data(), n_rows, vocab, vocab, in.mask, greedy_keys_.data(),
                  picked_ids_.data(), stream_);
    return;
  }
  sample_tokens(logits_.data(), n_rows, vocab, vocab, in.temperature, in.top_k, in.top_p, in.min_p,
                in.uniform, in.mask, picked_ids_.data(), stream_);
}

CudaModel::PickInputs CudaModel::upload_pick_inputs(const ForwardBatch& batch, int32_t n_rows) {
  // One staging copy, 4-byte words: temperature, top_p, min_p, uniform,
  // top_k, top_logprobs, keep [n_rows] each, then (masked steps) row_mask
  // [n_rows] and the bits.
  const LogitMasks* masks = batch.masks;
  const bool masked = masks != nullptr && !masks->empty();
  if (masked) {
    SS_CHECK_EQ(masks->row_mask.size(), size_t(n_rows));
    SS_CHECK_EQ(int64_t{masks->words_per_row}, (config_.vocab_size + 31) / 32);
  }
  SS_CHECK(batch.sampling.empty() || batch.sampling.size() == size_t(n_rows));
  const auto n = size_t(n_rows);
  const size_t words = 7 * n + (masked ? n + masks->bits.size() : 0);
  grow_pinned(reinterpret_cast<void**>(&pick_host_), &pick_host_capacity_,
              words * sizeof(uint32_t));
  auto* f = reinterpret_cast<float*>(pick_host_);
  auto* k = reinterpret_cast<int32_t*>(pick_host_ + 4 * n);
  auto* top = reinterpret_cast<int32_t*>(pick_host_ + 5 * n);
  auto* keep = reinterpret_cast<int32_t*>(pick_host_ + 6 * n);
  SS_CHECK(batch.keep_rows.empty() || batch.keep_rows.size() == n);
  for (size_t r = 0; r < n; ++r) keep[r] = batch.keep_rows.empty() ? -1 : batch.keep_rows[r];
  SS_CHECK(batch.top_logprobs.empty() || batch.top_logprobs.size() == n);
  PickInputs in;
  for (size_t r = 0; r < n; ++r) {
    top[r] = batch.top_logprobs.empty() ? -1 : batch.top_logprobs[r];
    SS_CHECK_LE(top[r], kMaxTopLogprobs);
    in.max_top_logprobs = std::max(in.max_top_logprobs, top[r]);
  }
  in.all_greedy = true;
  for (size_t r = 0; r < n; ++r) {
    const RowSampling s = batch.sampling.empty() ? RowSampling{} : batch.sampling[r];
    in.all_greedy = in.all_greedy && !(s.temperature > 0.0f);  // sample_tokens' greedy test
    f[r] = s.temperature;
    f[n + r] = s.top_p;
    f[2 * n + r] = s.min_p;
    f[3 * n + r] = s.uniform;
    k[r] = s.top_k;
  }
  if (masked) {
    std::memcpy(pick_host_ + 7 * n, masks->row_mask.data(), n * sizeof(int32_t));
    std::memcpy(pick_host_ + 8 * n, masks->bits.data(), masks->bits.size() * sizeof(uint32_t));
  }
  pick_inputs_.reserve(words);
  // The staging is reused next step only after finish_step's stream sync.
  SS_CUDA_CHECK(cudaMemcpyAsync(pick_inputs_.data(), pick_host_, words * sizeof(uint32_t),
                                cudaMemcpyHostToDevice, stream_));
  const uint32_t* d = pick_inputs_.data();
  in.temperature = reinterpret_cast<const float*>(d);
  in.top_p = reinterpret_cast<const float*>(d + n);
  in.min_p = reinterpret_cast<const float*>(d + 2 * n);
  in.uniform = reinterpret_cast<const float*>(d + 3 * n);
  in.top_k = reinterpret_cast<const int32_t*>(d + 4 * n);
  in.top_logprobs = reinterpret_cast<const int32_t*>(d + 5 * n);
  in.keep = reinterpret_cast<const int32_t*>(d + 6 * n);
  if (masked) {
    in.mask.row_mask = reinterpret_cast<const int32_t*>(d + 7 * n);
    in.mask.bits = d + 8 * n;
  }
  return in;
}

void CudaModel::queue_logprobs(int32_t n_rows, const PickInputs& in) {
  // Rows without logprobs are skipped by the kernel; their slots stay unread.
  const auto width = size_t(1 + in.max_top_logprobs);
  logprob_values_.reserve(size_t(n_rows) * width);
  logprob_ids_.reserve(std::max<size_t>(1, size_t(n_rows) * size_t(in.max_top_logprobs)));
  token_logprobs(logits_.data(), n_rows, static_cast<int32_t>(config_.vocab_size),
                 config_.vocab_size, picked_ids_.data(), in.top_logprobs, in.max_top_logprobs,
                 logprob_values_.data(), logprob_ids_.data(), stream_);
  const size_t value_bytes = size_t(n_rows) * width * sizeof(float);
  const size_t id_bytes = size_t(n_rows) * size_t(in.max_top_logprobs) * sizeof(int32_t);
  grow_pinned(reinterpret_cast<void**>(&logprobs_host_), &logprobs_host_capacity_,
              value_bytes + id_bytes);
  SS_CUDA_CHECK(cudaMemcpyAsync(logprobs_host_, logprob_values_.data(), value_bytes,
                                cudaMemcpyDeviceToHost, stream_));
  if (id_bytes > 0) {
    SS_CUDA_CHECK(cudaMemcpyAsync(reinterpret_cast<uint8_t*>(logprobs_host_) + value_bytes,
                                  logprob_ids_.data(), id_bytes, cudaMemcpyDeviceToHost, stream_));
  }
  logprobs_width_ = in.max_top_logprobs;
}

void CudaModel::keep_rows(const ForwardBatch& batch, int32_t n_rows, const PickInputs& in) {
  const int64_t vocab = config_.vocab_size;
  int64_t needed = n_kept_;
  for (int32_t row : batch.keep_rows) needed = std::max<int64_t>(needed, int64_t{row} + 1);
  if (size_t(needed * vocab) > kept_.size()) {
    DeviceBuffer<float> grown(size_t(needed * vocab));
    if (n_kept_ > 0) {
      SS_CUDA_CHECK(cudaMemcpyAsync(grown.data(), kept_.data(), size_t(n_kept_ * vocab) * 4,
                                    cudaMemcpyDeviceToDevice, stream_));
    }
    kept_ = std::move(grown);  // cudaFree waits for the copy
  }
  n_kept_ = needed;
  keep_logit_rows(logits_.data(), n_rows, static_cast<int32_t>(vocab), in.keep, kept_.data(),
                  stream_);
}

void CudaModel::queue_verifications(const ForwardBatch& batch) {
  // Staging, 4-byte words: chunks [n, 3], params [n, 3], top_k [n], tokens
  // [n, max_k], uniforms [n, max_k + 1]; the outcomes [n, 2] come back after.
  const std::span<const RowVerification> v = batch.verifications;
  const auto n = static_cast<int32_t>(v.size());
  int32_t max_k = 1;
  for (const RowVerification& one : v)
    max_k = std::max(max_k, static_cast<int32_t>(one.draft_tokens.size()));
  const KeptRows& draft = batch.draft_rows;
  SS_CHECK(draft.on_device && draft.data != nullptr);
  const size_t un = size_t(n), uk = size_t(max_k);
  const size_t words = 7 * un + un * uk + un * (uk + 1);
  verify_out_offset_ = words;
  grow_pinned(reinterpret_cast<void**>(&verify_host_), &verify_host_capacity_,
              (words + 2 * un) * sizeof(uint32_t));
  auto* chunks = reinterpret_cast<int32_t*>(verify_host_);
  auto* params = reinterpret_cast<float*>(verify_host_ + 3 * un);
  auto* top_k = reinterpret_cast<int32_t*>(verify_host_ + 6 * un);
  auto* tokens = reinterpret_cast<int32_t*>(verify_host_ + 7 * un);
  auto* uniforms = reinterpret_cast<float*>(verify_host_ + 7 * un + un * uk);
  for (size_t c = 0; c < un; ++c) {
    const RowVerification& one = v[c];
    const auto k = static_cast<int32_t>(one.draft_tokens.size());
    chunks[3 * c] = one.first_row;
    chunks[3 * c + 1] = one.first_kept_row;
    chunks[3 * c + 2] = k;
    params[3 * c] = one.sampling.temperature;
    params[3 * c + 1] = one.sampling.top_p;
    params[3 * c + 2] = one.sampling.min_p;
    top_k[c] = one.sampling.top_k;
    for (int32_t i = 0; i < max_k; ++i) {
      tokens[c * uk + size_t(i)] = i < k ? one.draft_tokens[size_t(i)] : 0;
    }
    for (int32_t i = 0; i <= max_k; ++i) {
      uniforms[c * (uk + 1) + size_t(i)] = i <= k ? one.uniforms[size_t(i)] : 0.0f;
    }
  }
  verify_inputs_.reserve(words);
  SS_CUDA_CHECK(cudaMemcpyAsync(verify_inputs_.data(), verify_host_, words * sizeof(uint32_t),
                                cudaMemcpyHostToDevice, stream_));
  verify_scratch_.reserve(verify_scratch_bytes(n, max_k));
  verify_out_.reserve(2 * un);
  const uint32_t* d = verify_inputs_.data();
  DraftVerification in;
  in.target = logits_.data();
  in.target_ld = config_.vocab_size;
  in.vocab = static_cast<int32_t>(config_.vocab_size);
  in.draft = draft.data;
  in.draft_ld = draft.vocab;
  in.draft_vocab = static_cast<int32_t>(draft.vocab);
  in.n_chunks = n;
  in.max_k = max_k;
  in.chunks = reinterpret_cast<const int32_t*>(d);
  in.params = reinterpret_cast<const float*>(d + 3 * un);
  in.top_k = reinterpret_cast<const int32_t*>(d + 6 * un);
  in.tokens = reinterpret_cast<const int32_t*>(d + 7 * un);
  in.uniforms = reinterpret_cast<const float*>(d + 7 * un + un * uk);
  in.picked = picked_ids_.data();  // the chunks' rows pick what they emitted
  verify_draft_rows(in, verify_scratch_.data(), verify_out_.data(), stream_);
  SS_CUDA_CHECK(cudaMemcpyAsync(verify_host_ + words, verify_out_.data(), 2 * un * sizeof(int32_t),
                                cudaMemcpyDeviceToHost, stream_));
}

void CudaModel::collect_verifications(const ForwardBatch& batch) {
  const auto* out = reinterpret_cast<const int32_t*>(verify_host_ + verify_out_offset_);
  batch.verified->clear();
  for (size_t c = 0; c < batch.verifications.size(); ++c) {
    batch.verified->push_back(VerifyOutcome{out[2 * c], out[2 * c + 1]});
  }
}

void CudaModel::collect_logprobs(const ForwardBatch& batch, int32_t n_rows) {
  // After the stream sync: the staged [rows, 1 + w] values, then [rows, w] ids.
  const int32_t w = logprobs_width_;
  const float* values = logprobs_host_;
  const auto* ids = reinterpret_cast<const int32_t*>(values + size_t(n_rows) * size_t(1 + w));
  batch.logprobs->assign(size_t(n_rows), RowLogprobs{});
  for (int32_t r = 0; r < n_rows; ++r) {
    const int32_t top = batch.top_logprobs[size_t(r)];
    if (top < 0) continue;
    RowLogprobs& out = (*batch.logprobs)[size_t(r)];
    const float* row = values + size_t(r) * size_t(1 + w);
    out.logprob = row[0];
    const int32_t n = std::min<int32_t>(top, static_cast<int32_t>(config_.vocab_size));
    for (int32_t j = 0; j < n; ++j)
      out.top.emplace_back(ids[size_t(r) * size_t(w) + size_t(j)], row[1 + j]);
  }
}

}  // namespace specstack::cuda
