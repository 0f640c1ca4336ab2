// sample_tokens against sample_tokens_reference, the rule of sampling.cu
// written out on the CPU in double precision (grammar masks included: a
// masked token reads as -inf); moe_topk against
// CpuBackend::softmax_rows plus the partial sort of Transformer::moe_mlp.
//
// The GPU sums weights in fp32 (and its expf differs from the CPU's in the
// last ulp), so a token whose cumulative-probability interval, or a top-p cut
// whose mass, lies within kBoundary of the target is marked ambiguous: for
// those the test only checks that the GPU's token is a valid candidate. The
// distributions are peaked like a language model's so that most draws are
// far from any boundary and must match exactly.
#include "cuda/sampling.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "cuda/cuda_test_util.h"
#include "tensor/tensor.h"

namespace specstack::cuda {
namespace {

namespace ct = ::specstack::cuda::testing;

constexpr float kInf = std::numeric_limits<float>::infinity();
// Relative distance (to the total mass) under which fp32 rounding may decide.
constexpr double kBoundary = 3e-5;

struct Reference {
  int32_t token = -1;
  bool ambiguous = false;
  // For ambiguous cases: the widest kept set any rounding could produce is
  // {l >= loosest_cut} (within the top-k set).
  float loosest_cut = -kInf;
};

float clean_logit(float v) {
  if (std::isnan(v)) return -kInf;
  return v == 0.0f ? 0.0f : v;
}

bool admitted(const std::vector<uint32_t>& mask, int32_t token) {
  return mask.empty() || ((mask[size_t(token) / 32] >> (token % 32)) & 1u) != 0;
}

// The rule documented in src/cuda/sampling.cu, exact (double) sums. `mask`
// [ceil(vocab / 32)] admitted tokens; empty: all.
Reference sample_tokens_reference(const float* logits, int32_t vocab, float temperature,
                                  int32_t top_k, float top_p, float uniform,
                                  const std::vector<uint32_t>& mask = {}, float min_p = 0.0f) {
  std::vector<float> l(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) {
    l[size_t(i)] = admitted(mask, i) ? clean_logit(logits[i]) : -kInf;
  }
  Reference ref;
  int32_t arg = 0;
  for (int32_t i = 1; i < vocab; ++i) {
    if (l[size_t(i)] > l[size_t(arg)]) arg = i;
  }
  const float m = l[size_t(arg)];
  if (!(temperature > 0.0f) || m == -kInf) {
    ref.token = arg;
    return ref;
  }
  const float inv_t = 1.0f / temperature;
  std::vector<double> w(l.size());
  for (size_t i = 0; i < l.size(); ++i) {
    w[i] = l[i] == m ? 1.0 : static_cast<double>(std::exp((l[i] - m) * inv_t));
  }
  // Logit values in descending order (with multiplicity).
  std::vector<float> sorted = l;
  std::sort(sorted.begin(), sorted.end(), std::greater<float>());

  float t_k = -kInf;
  if (top_k > 0 && top_k < vocab) t_k = sorted[size_t(top_k - 1)];
  double z1 = 0.0;
  for (size_t i = 0; i < l.size(); ++i) {
    if (l[i] >= t_k) z1 += w[i];
  }

  float t_p = t_k;
  ref.loosest_cut = t_k;
  if (top_p < 1.0f) {
    // Walk groups of equal logits from the top; the cut is the first group
    // whose cumulative mass reaches top_p of the top-k mass.
    const double needed = static_cast<double>(top_p) * z1;
    double cumulative = 0.0;
    size_t g = 0;
    bool found = false;
    while (g < sorted.size() && sorted[g] >= t_k) {
      const float value = sorted[g];
      const double weight = value == m ? 1.0 : static_cast<double>(std::exp((value - m) * inv_t));
      size_t count = 0;
      while (g < sorted.size() && sorted[g] == value) ++g, ++count;
      const bool first = cumulative == 0.0;  // the top group always qualifies
      const double before = cumulative;
      cumulative += weight * static_cast<double>(count);
      // Could fp32 rounding put the cut at this group or just above it?
      const bool near = std::abs(cumulative - needed) <= kBoundary * z1 ||
                        (!first && std::abs(before - needed) <= kBoundary * z1);
      if (!found && cumulative >= needed) {
        t_p = value;
        found = true;
        if (near) ref.ambiguous = true;
      }
      if (near || !found) ref.loosest_cut = value;
      if (found && cumulative > needed + kBoundary * z1) break;
    }
    if (!found) t_p = t_k;  // rounding only: t_k always qualifies
  }

  // min-p zeroes the kept weights below it; a weight within an fp32 ulp of
  // it (the GPU's expf) could fall either side.
  for (size_t i = 0; i < l.size(); ++i) {
    if (l[i] < t_p || min_p <= 0.0f) continue;
    if (std::abs(w[i] - min_p) <= 1e-6 * min_p) ref.ambiguous = true;
    if (w[i] < min_p) w[i] = 0.0;
  }
  double total = 0.0;
  for (size_t i = 0; i < l.size(); ++i) {
    if (l[i] >= t_p) total += w[i];
  }
  const double target = static_cast<double>(uniform) * total;
  double cumulative = 0.0;
  int32_t last_positive = arg;
  for (size_t i = 0; i < l.size(); ++i) {
    if (l[i] < t_p) continue;
    const double before = cumulative;
    cumulative += w[i];
    if (w[i] > 0.0) last_positive = static_cast<int32_t>(i);
    if (cumulative > target) {
      ref.token = static_cast<int32_t>(i);
      if (cumulative - target <= kBoundary * total || target - before <= kBoundary * total) {
        ref.ambiguous = true;
      }
      return ref;
    }
  }
  ref.token = last_positive;
  ref.ambiguous = true;
  return ref;
}

struct Row {
  std::vector<float> logits;  // [vocab]
  float temperature = 1.0f;
  int32_t top_k = 0;
  float top_p = 1.0f;
  float uniform = 0.5f;
  std::vector<uint32_t> mask;  // [ceil(vocab / 32)] grammar mask; empty: none
  float min_p = 0.0f;
};

// Runs rows through sample_tokens with row stride ld = vocab + pad (the pad
// holds huge logits that must never be read), returns the tokens.
std::vector<int32_t> run_gpu(const std::vector<Row>& rows, int32_t vocab, int32_t pad,
                             bool greedy = false) {
  const int64_t ld = vocab + pad;
  std::vector<float> logits(rows.size() * ld, 1e30f);
  std::vector<float> temperature, top_p, min_p, uniform;
  std::vector<int32_t> top_k, row_mask;
  std::vector<uint32_t> bits;  // the masked rows' masks, in row order
  for (size_t r = 0; r < rows.size(); ++r) {
    std::copy(rows[r].logits.begin(), rows[r].logits.end(), logits.begin() + r * ld);
    temperature.push_back(rows[r].temperature);
    top_k.push_back(rows[r].top_k);
    top_p.push_back(rows[r].top_p);
    min_p.push_back(rows[r].min_p);
    uniform.push_back(rows[r].uniform);
    row_mask.push_back(-1);
    if (!rows[r].mask.empty()) {
      EXPECT_EQ(rows[r].mask.size(), size_t(vocab + 31) / 32);
      row_mask.back() = static_cast<int32_t>(bits.size() / rows[r].mask.size());
      bits.insert(bits.end(), rows[r].mask.begin(), rows[r].mask.end());
    }
  }
  auto d_logits = ct::upload(logits);
  auto d_temperature = ct::upload(temperature);
  auto d_top_k = ct::upload(top_k);
  auto d_top_p = ct::upload(top_p);
  auto d_min_p = ct::upload(min_p);
  auto d_uniform = ct::upload(uniform);
  DeviceBuffer<int32_t> d_out(rows.size());
  d_out.fill_bytes(0xFF);
  DeviceBuffer<uint32_t> d_bits;
  DeviceBuffer<int32_t> d_row_mask;
  TokenMaskRows mask;  // none unless some row has one
  if (!bits.empty()) {
    d_bits = ct::upload(bits);
    d_row_mask = ct::upload(row_mask);
    mask.bits = d_bits.data();
    mask.row_mask = d_row_mask.data();
  }
  if (greedy) {  // greedy_tokens: the caller knows every row is greedy
    DeviceBuffer<unsigned long long> keys(
        greedy_workspace_words(static_cast<int32_t>(rows.size()), vocab));
    keys.fill_bytes(0xA5);  // no initial contents are needed
    greedy_tokens(d_logits.data(), static_cast<int32_t>(rows.size()), vocab, ld, mask, keys.data(),
                  d_out.data(), nullptr);
    return d_out.download();
  }
  sample_tokens(d_logits.data(), static_cast<int32_t>(rows.size()), vocab, ld, d_temperature.data(),
                d_top_k.data(), d_top_p.data(), d_min_p.data(), d_uniform.data(), mask,
                d_out.data(), nullptr);
  return d_out.download();
}

// Compares every row; returns the number of ambiguous ones.
int check_rows(const std::vector<Row>& rows, int32_t vocab, const std::vector<int32_t>& got) {
  int ambiguous = 0;
  for (size_t r = 0; r < rows.size(); ++r) {
    const Row& row = rows[r];
    const Reference ref =
        sample_tokens_reference(row.logits.data(), vocab, row.temperature, row.top_k, row.top_p,
                                row.uniform, row.mask, row.min_p);
    SCOPED_TRACE(::testing::Message()
                 << "row " << r << " T " << row.temperature << " top_k " << row.top_k << " top_p "
                 << row.top_p << " min_p " << row.min_p << " u " << row.uniform);
    if (!ref.ambiguous) {
      EXPECT_EQ(got[r], ref.token);
      continue;
    }
    ++ambiguous;
    if (got[r] < 0 || got[r] >= vocab) {
      ADD_FAILURE() << "token " << got[r] << " out of range";
      continue;
    }
    EXPECT_TRUE(admitted(row.mask, got[r])) << "token " << got[r] << " is masked";
    EXPECT_GE(clean_logit(row.logits[size_t(got[r])]), ref.loosest_cut);
  }
  return ambiguous;
}

// Logits like a language model's: a normal bulk whose spread makes the mass
// sit on tens of tokens.
std::vector<float> peaked_logits(std::mt19937& rng, int32_t vocab, float spread) {
  std::normal_distribution<float> normal(0.0f, spread);
  std::vector<float> out(static_cast<size_t>(vocab));
  for (auto& v : out) v = normal(rng);
  return out;
}

TEST(CudaSampling, RandomRowsMatchReference) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(31);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const float temperatures[] = {0.0f, 0.3f, 0.7f, 1.0f, 1.5f};
  const int32_t top_ks[] = {0, 1, 5, 20, 50, 1000};
  const float top_ps[] = {1.0f, 0.95f, 0.8f, 0.5f, 0.0f};
  const float min_ps[] = {0.0f, 0.0f, 0.02f, 0.1f, 0.5f};
  for (int32_t vocab : {512, 151936}) {
    for (int32_t pad : {0, 13}) {
      SCOPED_TRACE(::testing::Message() << "vocab " << vocab << " pad " << pad);
      // Spread so that tens of tokens carry the mass even at T = 1.5.
      const float spread = vocab > 10000 ? 6.0f : 2.0f;
      std::vector<Row> rows;
      for (int i = 0; i < 96; ++i) {
        Row row;
        row.logits = peaked_logits(rng, vocab, spread);
        row.temperature = temperatures[rng() % std::size(temperatures)];
        row.top_k = top_ks[rng() % std::size(top_ks)];
        row.top_p = top_ps[rng() % std::size(top_ps)];
        row.min_p = min_ps[rng() % std::size(min_ps)];
        row.uniform = unit(rng);
        if (row.uniform >= 1.0f) row.uniform = 0.5f;
        rows.push_back(std::move(row));
      }
      const int ambiguous = check_rows(rows, vocab, run_gpu(rows, vocab, pad));
      EXPECT_LE(ambiguous, 12) << "too few rows compared exactly";
    }
  }
}

// Rows whose cut does not fit in shared memory (top_k 5000: the passes over
// the whole row), cuts of hundreds to thousands of candidates (the CTA-wide
// searches, chunks with more candidates than slots) and cold rows whose k-th
// token lies beyond 128 nats (weight exactly 0), at the full vocab.
TEST(CudaSampling, LargeTopKAndColdRowsMatchReference) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(34);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const int32_t vocab = 151936;
  struct Config {
    float temperature;
    int32_t top_k;
    float top_p;
  };
  const Config configs[] = {{1.0f, 5000, 1.0f},  {0.8f, 5000, 0.9f},   {0.05f, 50, 1.0f},
                            {0.02f, 0, 0.9f},    {0.05f, 300, 0.5f},   {1.0f, 0, 0.95f},
                            {1.2f, 4097, 0.99f}, {0.5f, 100000, 1.0f}, {0.9f, 2000, 1.0f},
                            {1.0f, 600, 0.95f}};
  std::vector<Row> rows;
  for (int i = 0; i < 60; ++i) {
    const Config& c = configs[size_t(i) % std::size(configs)];
    Row row;
    row.logits = peaked_logits(rng, vocab, 6.0f);
    row.temperature = c.temperature;
    row.top_k = c.top_k;
    row.top_p = c.top_p;
    row.uniform = std::min(unit(rng), 0.99f);
    rows.push_back(std::move(row));
  }
  for (int32_t pad : {0, 5}) {  // float4 and scalar loads
    const int ambiguous = check_rows(rows, vocab, run_gpu(rows, vocab, pad));
    EXPECT_LE(ambiguous, 6) << "too few rows compared exactly, pad " << pad;
  }
}

// Greedy ties, NaN, +-inf, -0 vs +0, all -inf, ties at the top-k cut, top_k = 1
// among tied maxima, and a flat row with top_p (checked loosely).
TEST(CudaSampling, EdgeRows) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(32);
  const int32_t vocab = 3000;
  const float nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<Row> rows;
  auto add = [&](std::vector<float> logits, float t, int32_t k, float p, float u) {
    rows.push_back(Row{std::move(logits), t, k, p, u, {}});
  };
  std::vector<float> base = peaked_logits(rng, vocab, 2.0f);
  {  // greedy: the max appears three times, the lowest index wins
    std::vector<float> l = base;
    l[700] = l[1200] = l[2900] = 50.0f;
    add(l, 0.0f, 0, 1.0f, 0.3f);
    add(l, -1.0f, 5, 0.5f, 0.9f);
    // top_k = 1 keeps all three tied maxima; u = 0.5 picks the second.
    add(l, 1.0f, 1, 1.0f, 0.5f);
    // top_k = 2 also keeps them all (ties with the 2nd); u = 0.9 the third.
    add(l, 0.7f, 2, 1.0f, 0.9f);
  }
  {  // NaNs never win; +inf is the max and takes all the mass
    std::vector<float> l = base;
    for (int i = 0; i < vocab; i += 7) l[size_t(i)] = nan;
    add(l, 0.0f, 0, 1.0f, 0.1f);
    add(l, 1.0f, 0, 0.9f, 0.6f);
    l[1234] = kInf;
    add(l, 1.0f, 0, 1.0f, 0.99f);
    add(l, 0.0f, 0, 1.0f, 0.99f);
  }
  {  // all -inf or NaN: token 0
    std::vector<float> l(static_cast<size_t>(vocab), -kInf);
    l[5] = nan;
    add(l, 1.0f, 0, 1.0f, 0.5f);
    add(l, 0.0f, 0, 1.0f, 0.5f);
  }
  {  // -0 and +0 are one value: greedy picks the first zero
    std::vector<float> l(static_cast<size_t>(vocab), -5.0f);
    l[10] = -0.0f;
    l[20] = 0.0f;
    add(l, 0.0f, 0, 1.0f, 0.5f);
    add(l, 1.0f, 1, 1.0f, 0.75f);  // both kept, u = 0.75 picks index 20
  }
  {  // ties straddling the top-k cut: the 5th..9th largest are equal
    std::vector<float> l = base;
    for (float& v : l) v = std::min(v, 5.0f);
    l[3] = 9.0f, l[30] = 8.5f, l[300] = 8.0f, l[2999] = 7.5f;
    for (int i : {100, 200, 1500, 2500, 2600}) l[size_t(i)] = 7.0f;
    add(l, 1.0f, 5, 1.0f, 0.999f);
    add(l, 1.0f, 7, 1.0f, 0.9f);
    add(l, 2.0f, 5, 0.99f, 0.97f);
  }
  {  // a flat row: a top-p nucleus of thousands of near-equal tokens
    std::vector<float> l = peaked_logits(rng, vocab, 0.1f);
    add(l, 1.0f, 0, 0.9f, 0.42f);
    add(l, 1.0f, 100, 1.0f, 0.42f);
  }
  const std::vector<int32_t> got = run_gpu(rows, vocab, 3);
  check_rows(rows, vocab, got);
  // The spelled-out answers of the unambiguous edge rows.
  EXPECT_EQ(got[0], 700);
  EXPECT_EQ(got[1], 700);
  EXPECT_EQ(got[2], 1200);
  EXPECT_EQ(got[3], 2900);
  EXPECT_NE(got[4] % 7, 0);
  EXPECT_EQ(got[6], 1234);
  EXPECT_EQ(got[7], 1234);
  EXPECT_EQ(got[8], 0);
  EXPECT_EQ(got[9], 0);
  EXPECT_EQ(got[10], 10);
  EXPECT_EQ(got[11], 20);
}

// Grammar masks: random masks of every density, a mask admitting one token
// (a cold one), rows whose argmax is masked, a mask admitting nothing (token
// 0, as the host sampler) and unmasked rows between masked ones; greedy and
// sampled with fixed uniforms, float4 and scalar loads, at 3000 and the
// full vocabulary.
TEST(CudaSampling, MaskedRowsMatchReference) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(35);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  struct Config {
    float temperature;
    int32_t top_k;
    float top_p;
  };
  const Config configs[] = {{0.0f, 0, 1.0f}, {1.0f, 0, 1.0f},   {0.7f, 20, 1.0f},
                            {1.0f, 0, 0.9f}, {1.2f, 50, 0.95f}, {0.0f, 5, 0.5f},
                            {1.5f, 0, 0.8f}, {0.5f, 1, 1.0f},   {1.0f, 5000, 1.0f}};
  for (int32_t vocab : {3000, 151936}) {
    const size_t words = size_t(vocab + 31) / 32;
    auto random_mask = [&](double density) {
      std::vector<uint32_t> mask(words, 0);
      for (int32_t t = 0; t < vocab; ++t) {
        if (unit(rng) < density) mask[size_t(t) / 32] |= 1u << (t % 32);
      }
      return mask;
    };
    std::vector<Row> rows;
    std::vector<size_t> one_token_rows, masked_argmax_rows;
    std::vector<int32_t> one_token, argmax_token;
    for (int i = 0; i < 72; ++i) {
      const Config& c = configs[size_t(i) % std::size(configs)];
      Row row;
      row.logits = peaked_logits(rng, vocab, vocab > 10000 ? 6.0f : 2.0f);
      row.temperature = c.temperature;
      row.top_k = c.top_k;
      row.top_p = c.top_p;
      row.uniform = std::min(unit(rng), 0.99f);
      const int32_t argmax = static_cast<int32_t>(
          std::max_element(row.logits.begin(), row.logits.end()) - row.logits.begin());
      switch (i % 6) {
        case 0:  // unmasked, between masked rows
          break;
        case 1:
          row.mask = random_mask(0.5);
          break;
        case 2:  // sparse: a JSON state admits few tokens
          row.mask = random_mask(0.01);
          break;
        case 3: {  // one admitted token, far from the top
          row.mask.assign(words, 0);
          const auto coldest = static_cast<int32_t>(
              std::min_element(row.logits.begin(), row.logits.end()) - row.logits.begin());
          row.mask[size_t(coldest) / 32] |= 1u << (coldest % 32);
          one_token_rows.push_back(rows.size());
          one_token.push_back(coldest);
          break;
        }
        case 4:  // everything but the argmax
          row.mask.assign(words, ~0u);
          row.mask[size_t(argmax) / 32] &= ~(1u << (argmax % 32));
          masked_argmax_rows.push_back(rows.size());
          argmax_token.push_back(argmax);
          break;
        case 5:  // dense with a few holes, and the top ten masked
          row.mask = random_mask(0.99);
          for (int32_t k = 0; k < 10; ++k) {
            const int32_t top = static_cast<int32_t>(
                std::max_element(row.logits.begin(), row.logits.end()) - row.logits.begin());
            row.mask[size_t(top) / 32] &= ~(1u << (top % 32));
            row.logits[size_t(top)] = -50.0f;  // the next one up (its mask bit stays clear)
          }
          break;
      }
      rows.push_back(std::move(row));
    }
    {  // a mask admitting nothing: token 0 (the engine's grammar ends such a choice)
      Row row;
      row.logits = peaked_logits(rng, vocab, 2.0f);
      row.mask.assign(words, 0);
      rows.push_back(row);
      row.temperature = 0.0f;
      rows.push_back(std::move(row));
    }
    for (int32_t pad : {0, 5}) {  // float4 and scalar loads
      SCOPED_TRACE(::testing::Message() << "vocab " << vocab << " pad " << pad);
      const std::vector<int32_t> got = run_gpu(rows, vocab, pad);
      const int ambiguous = check_rows(rows, vocab, got);
      EXPECT_LE(ambiguous, 8) << "too few rows compared exactly";
      for (size_t j = 0; j < one_token_rows.size(); ++j) {
        EXPECT_EQ(got[one_token_rows[j]], one_token[j]) << "row " << one_token_rows[j];
      }
      for (size_t j = 0; j < masked_argmax_rows.size(); ++j) {
        EXPECT_NE(got[masked_argmax_rows[j]], argmax_token[j]) << "row " << masked_argmax_rows[j];
      }
      EXPECT_EQ(got[rows.size() - 2], 0);
      EXPECT_EQ(got[rows.size() - 1], 0);
    }
  }
}

// greedy_tokens (many CTAs a row) against sample_tokens' one-CTA greedy pass
// and the reference, on rows built to catch a slice-merging mistake: equal
// maxima in different slices (the lowest index wins), NaN (never wins), -0
// against +0 (one value: the lower index wins), +inf, rows of -inf (token 0),
// grammar masks, vocabularies of one slice, several, and not a multiple of 4.
TEST(CudaSampling, GreedyTokensEqualSampleTokens) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(61);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int32_t vocab : {1, 5, 3000, 16388, 151936, 200003}) {
    const size_t words = size_t(vocab + 31) / 32;
    std::vector<Row> rows;
    for (int i = 0; i < 40; ++i) {
      Row row;
      row.temperature = 0.0f;
      row.logits = peaked_logits(rng, vocab, vocab > 10000 ? 6.0f : 2.0f);
      const float top = *std::max_element(row.logits.begin(), row.logits.end());
      auto at = [&](int64_t i) -> float& { return row.logits[size_t(i % vocab)]; };
      switch (i % 10) {
        case 0:
          break;
        case 1:  // the max three times, far apart (other slices): the first wins
          at(vocab - 1) = top + 1.0f;
          at(vocab / 2) = top + 1.0f;
          at(vocab / 3 + 1) = top + 1.0f;
          break;
        case 2:  // NaN everywhere around a max
          for (int64_t j = 0; j < vocab; j += 7) at(j) = nan;
          at(vocab - 2) = top + 2.0f;
          break;
        case 3:  // -0 and +0 are one value; every other logit below them
          for (float& v : row.logits) v = -std::abs(v) - 1.0f;
          at(vocab - 1) = 0.0f;
          at(vocab / 2) = -0.0f;
          break;
        case 4:  // +inf twice
          at(vocab - 3) = kInf;
          at(vocab * 2 / 3) = kInf;
          break;
        case 5:  // all -inf or NaN: token 0
          for (int64_t j = 0; j < vocab; ++j) at(j) = j % 2 == 0 ? -kInf : nan;
          break;
        case 6:  // masked, half the tokens
          row.mask.assign(words, 0);
          for (int32_t t = 0; t < vocab; ++t) {
            if (unit(rng) < 0.5f) row.mask[size_t(t) / 32] |= 1u << (t % 32);
          }
          break;
        case 7: {  // masked: everything but the argmax
          const auto arg =
              std::max_element(row.logits.begin(), row.logits.end()) - row.logits.begin();
          row.mask.assign(words, ~0u);
          row.mask[size_t(arg) / 32] &= ~(1u << (arg % 32));
          break;
        }
        case 8:  // masked: nothing admitted
          row.mask.assign(words, 0);
          break;
        case 9:  // one equal value everywhere: token 0
          for (float& v : row.logits) v = 1.5f;
          break;
      }
      rows.push_back(std::move(row));
    }
    for (int32_t pad : {0, 5}) {  // float4 and scalar loads
      SCOPED_TRACE(::testing::Message() << "vocab " << vocab << " pad " << pad);
      const std::vector<int32_t> greedy = run_gpu(rows, vocab, pad, /*greedy=*/true);
      const std::vector<int32_t> sampled = run_gpu(rows, vocab, pad);
      ASSERT_EQ(greedy.size(), rows.size());
      for (size_t r = 0; r < rows.size(); ++r) {
        const Reference ref = sample_tokens_reference(rows[r].logits.data(), vocab, 0.0f, 0, 1.0f,
                                                      0.5f, rows[r].mask);
        EXPECT_EQ(greedy[r], ref.token) << "row " << r;
        EXPECT_EQ(greedy[r], sampled[r]) << "row " << r;
      }
    }
  }
}

// The CPU side of moe_topk: softmax_rows, then Transformer::moe_mlp's partial sort.
void moe_reference(CpuBackend& cpu, const std::vector<float>& logits, int32_t n_tokens,
                   int32_t n_experts, int32_t k, bool renormalize, std::vector<int32_t>& ids,
                   std::vector<float>& weights) {
  Tensor probs_t = Tensor::zeros(DType::kF32, {n_tokens, n_experts});
  std::copy(logits.begin(), logits.end(), probs_t.f32());
  cpu.softmax_rows(probs_t);
  std::vector<int32_t> order(static_cast<size_t>(n_experts));
  for (int32_t t = 0; t < n_tokens; ++t) {
    const float* probs = probs_t.f32() + int64_t(t) * n_experts;
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
    });
    float total = 0.0f;
    for (int32_t i = 0; i < k; ++i) total += probs[order[size_t(i)]];
    for (int32_t i = 0; i < k; ++i) {
      const int32_t e = order[size_t(i)];
      ids.push_back(e);
      weights.push_back(renormalize ? probs[e] / total : probs[e]);
    }
  }
}

TEST(CudaSampling, MoeTopkMatchesCpu) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(33);
  CpuBackend cpu(CpuBackendOptions{2});
  struct Case {
    int32_t n_tokens, n_experts, k;
  };
  for (const Case& c : {Case{1, 8, 2}, Case{7, 60, 4}, Case{33, 64, 8}, Case{5, 128, 8},
                        Case{9, 256, 16}, Case{4, 1024, 16}, Case{6, 37, 1}, Case{3, 16, 16}}) {
    for (bool renormalize : {false, true}) {
      for (bool grid : {true, false}) {
        SCOPED_TRACE(::testing::Message() << "experts " << c.n_experts << " k " << c.k
                                          << " renormalize " << renormalize << " grid " << grid);
        // Grid logits (multiples of 1/32) give many exact ties, broken by id.
        std::vector<float> logits =
            ct::random_values(rng, size_t(c.n_tokens) * c.n_experts, -4.0f, 4.0f);
        if (grid) {
          for (float& v : logits) v = std::round(v * 8.0f) / 32.0f;
        }
        std::vector<int32_t> want_ids;
        std::vector<float> want_weights;
        moe_reference(cpu, logits, c.n_tokens, c.n_experts, c.k, renormalize, want_ids,
                      want_weights);

        auto d_logits = ct::upload(logits);
        DeviceBuffer<int32_t> d_ids(size_t(c.n_tokens) * c.k);
        DeviceBuffer<float> d_weights(size_t(c.n_tokens) * c.k);
        d_ids.fill_bytes(0xFF);
        d_weights.fill_bytes(0xFF);
        moe_topk(d_logits.data(), c.n_tokens, c.n_experts, c.k, renormalize, d_ids.data(),
                 d_weights.data(), nullptr);
        EXPECT_EQ(d_ids.download(), want_ids);
        // exp differs in the last ulps (AVX2 polynomial vs expf).
        EXPECT_LE(ct::relative_error(d_weights.download(), want_weights), 1e-5);
      }
    }
  }
}

}  // namespace
}  // namespace specstack::cuda
