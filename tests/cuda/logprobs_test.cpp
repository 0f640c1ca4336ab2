// token_logprobs (cuda/logprobs.h) against row_logprobs (model/row_logprobs.h),
// its CPU twin: random rows at a small and the full Qwen vocabulary, every
// top_n from 0 to 20 (rows with -1 skipped and left untouched), and edge
// rows: NaN logits (never a top token, logprob -inf), -inf logits, ties
// (the lower id first) and a +inf-free row of equal logits. The normaliser
// is a double sum in both, in different orders: logprobs agree to 1e-5, ids
// exactly (no two random logits here are within that of each other at the top).
#include "cuda/logprobs.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cuda/cuda_test_util.h"
#include "model/row_logprobs.h"

namespace specstack::cuda {
namespace {

namespace ct = ::specstack::cuda::testing;

struct Case {
  std::vector<float> logits;  // [vocab]
  int32_t token = 0;
  int32_t top_n = 0;  // -1: no logprobs for this row
};

void expect_rows_match(const std::vector<Case>& rows, int32_t vocab, int32_t pad) {
  const int64_t ld = vocab + pad;
  int32_t max_top = 0;
  std::vector<float> logits(rows.size() * size_t(ld), 0.0f);
  std::vector<int32_t> tokens, tops;
  for (size_t r = 0; r < rows.size(); ++r) {
    std::copy(rows[r].logits.begin(), rows[r].logits.end(), logits.begin() + r * size_t(ld));
    tokens.push_back(rows[r].token);
    tops.push_back(rows[r].top_n);
    max_top = std::max(max_top, rows[r].top_n);
  }
  const auto width = size_t(1 + max_top);
  auto d_logits = ct::upload(logits);
  auto d_tokens = ct::upload(tokens);
  auto d_tops = ct::upload(tops);
  DeviceBuffer<float> d_values(rows.size() * width);
  DeviceBuffer<int32_t> d_ids(std::max<size_t>(1, rows.size() * size_t(max_top)));
  d_values.fill_bytes(0x7F);  // a poison a skipped row must keep
  d_ids.fill_bytes(0x7F);
  token_logprobs(d_logits.data(), static_cast<int32_t>(rows.size()), vocab, ld, d_tokens.data(),
                 d_tops.data(), max_top, d_values.data(), d_ids.data(), nullptr);
  const std::vector<float> values = d_values.download();
  const std::vector<int32_t> ids = d_ids.download();
  for (size_t r = 0; r < rows.size(); ++r) {
    SCOPED_TRACE(::testing::Message() << "row " << r << " top_n " << rows[r].top_n);
    const float* got = values.data() + r * width;
    if (rows[r].top_n < 0) {
      uint32_t bits;
      std::memcpy(&bits, got, sizeof(bits));
      EXPECT_EQ(bits, 0x7F7F7F7Fu);
      continue;
    }
    const RowLogprobs want =
        row_logprobs(rows[r].logits.data(), vocab, rows[r].token, rows[r].top_n);
    if (std::isinf(want.logprob)) {
      EXPECT_EQ(got[0], want.logprob);
    } else {
      EXPECT_NEAR(got[0], want.logprob, 1e-5);
    }
    ASSERT_EQ(want.top.size(), size_t(rows[r].top_n));
    for (size_t j = 0; j < want.top.size(); ++j) {
      EXPECT_EQ(ids[r * size_t(max_top) + j], want.top[j].first) << "rank " << j;
      if (std::isinf(want.top[j].second)) {
        EXPECT_EQ(got[1 + j], want.top[j].second);
      } else {
        EXPECT_NEAR(got[1 + j], want.top[j].second, 1e-5) << "rank " << j;
      }
    }
  }
}

TEST(CudaLogprobs, RandomRowsMatchTheHostTwin) {
  SS_REQUIRE_GPU();
  std::mt19937 rng(41);
  for (int32_t vocab : {700, 151936}) {
    std::normal_distribution<float> normal(0.0f, vocab > 10000 ? 4.0f : 2.0f);
    std::vector<Case> rows;
    for (int32_t i = 0; i < 44; ++i) {
      Case c;
      c.logits.resize(size_t(vocab));
      for (float& v : c.logits) v = normal(rng);
      c.token = static_cast<int32_t>(rng() % uint32_t(vocab));
      c.top_n = i % 22 - 1;  // -1 .. 20
      rows.push_back(std::move(c));
    }
    expect_rows_match(rows, vocab, 0);
    expect_rows_match(rows, vocab, 3);
  }
}

TEST(CudaLogprobs, EdgeRows) {
  SS_REQUIRE_GPU();
  constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const int32_t vocab = 300;
  std::vector<Case> rows;
  std::vector<float> base(static_cast<size_t>(vocab));
  for (int32_t i = 0; i < vocab; ++i) base[size_t(i)] = std::sin(0.37f * float(i)) * 3.0f;
  {  // NaNs: never top, the NaN token's logprob is -inf
    Case c{base, 7, 20};
    for (int32_t i = 0; i < vocab; i += 5) c.logits[size_t(i)] = kNaN;
    c.logits[7] = kNaN;
    rows.push_back(c);
  }
  {  // -inf logits: logprob -inf, listed last when top_n reaches them
    Case c{std::vector<float>(size_t(vocab), -kInf), 3, 5};
    c.logits[10] = 1.0f;
    c.logits[250] = 2.0f;
    rows.push_back(c);
  }
  {  // ties: the lower id first
    Case c{base, 100, 6};
    c.logits[200] = c.logits[20] = c.logits[120] = 9.0f;
    rows.push_back(c);
  }
  {  // a flat row: every logprob -log(vocab), ids in order
    Case c{std::vector<float>(size_t(vocab), 0.5f), 299, 20};
    rows.push_back(c);
  }
  expect_rows_match(rows, vocab, 0);
}

}  // namespace
}  // namespace specstack::cuda
