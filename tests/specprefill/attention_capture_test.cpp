// AttentionCapture layout, early-EOS truncation and validation.
#include "specprefill/attention_capture.h"

#include <gtest/gtest.h>

namespace specstack {
namespace {

// Distinct value per (layer, step, head, dim).
float value(int64_t l, int64_t t, int64_t h, int64_t d) {
  return static_cast<float>(l * 1000 + t * 100 + h * 10 + d);
}

AttentionCapture filled(int64_t layers, int64_t steps, int64_t heads, int64_t dim) {
  AttentionCapture c = AttentionCapture::zeros(layers, steps, heads, dim);
  for (int64_t l = 0; l < layers; ++l)
    for (int64_t t = 0; t < steps; ++t)
      for (int64_t h = 0; h < heads; ++h)
        for (int64_t d = 0; d < dim; ++d) c.query(l, t)[h * dim + d] = value(l, t, h, d);
  return c;
}

TEST(AttentionCaptureTest, LayoutIsLayersStepsHeadsDim) {
  AttentionCapture c = filled(3, 4, 2, 5);
  EXPECT_EQ(c.queries.size(), 3u * 4 * 2 * 5);
  EXPECT_EQ(c.queries[((2 * 4 + 3) * 2 + 1) * 5 + 4], value(2, 3, 1, 4));
  EXPECT_TRUE(c.validate().ok());
}

TEST(AttentionCaptureTest, KeepFirstStepsCompactsEveryLayer) {
  AttentionCapture c = filled(3, 4, 2, 5);
  c.keep_first_steps(2);
  EXPECT_EQ(c.n_steps, 2);
  ASSERT_EQ(c.queries.size(), 3u * 2 * 2 * 5);
  ASSERT_TRUE(c.validate().ok());
  for (int64_t l = 0; l < 3; ++l)
    for (int64_t t = 0; t < 2; ++t)
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t d = 0; d < 5; ++d) ASSERT_EQ(c.query(l, t)[h * 5 + d], value(l, t, h, d));
  c.keep_first_steps(2);  // no-op
  EXPECT_EQ(c.query(2, 1)[0], value(2, 1, 0, 0));
}

TEST(AttentionCaptureTest, SlidingLayersAndWidestWindow) {
  AttentionCapture c = AttentionCapture::zeros(4, 1, 1, 1);
  EXPECT_EQ(c.max_window(), 0);
  c.layer_window = {0, 48, 0, 128};
  EXPECT_FALSE(c.is_sliding(0));
  EXPECT_TRUE(c.is_sliding(1));
  EXPECT_EQ(c.max_window(), 128);
}

TEST(AttentionCaptureTest, ValidateNamesTheProblem) {
  AttentionCapture c = AttentionCapture::zeros(2, 3, 4, 8);
  c.layer_window = {0};
  EXPECT_EQ(c.validate().message(),
            "attention capture: layer_window has 1 entries, expected n_layers 2");
  c.layer_window = {0, -1};
  EXPECT_EQ(c.validate().message(), "attention capture: layer_window[1] = -1 is negative");
  c.layer_window = {0, 0};
  c.queries.resize(10);
  EXPECT_EQ(c.validate().message(),
            "attention capture: queries holds 10 floats, expected 192 (2x3x4x8)");
  EXPECT_FALSE(AttentionCapture().validate().ok());
}

}  // namespace
}  // namespace specstack
