// Dequantization of every supported block type against values computed
// independently by gguf-py's reference numpy dequantizer on random blocks
// (tests/data/gguf/dequant, made by make_dequant_cases.py).
#include "gguf/gguf_dequant.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "base/mapped_file.h"
#include "test_util.h"

namespace specstack::gguf {
namespace {

struct Case {
  const char* name;
  GgmlType type;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

class GgufDequantTest : public ::testing::TestWithParam<Case> {};

TEST_P(GgufDequantTest, MatchesGgufPyReference) {
  const Case& c = GetParam();
  const std::string dir = specstack::testing::test_data("gguf/dequant/");
  Result<std::string> blocks = read_text_file(dir + c.name + ".blocks");
  Result<std::string> expected_bytes = read_text_file(dir + c.name + ".f32");
  ASSERT_TRUE(blocks.ok() && expected_bytes.ok());
  const int64_t n = static_cast<int64_t>(expected_bytes->size() / 4);
  std::vector<float> expected(static_cast<size_t>(n)), got(static_cast<size_t>(n), NAN);
  std::memcpy(expected.data(), expected_bytes->data(), expected_bytes->size());
  const auto traits = ggml_type_traits(static_cast<uint32_t>(c.type));
  ASSERT_TRUE(traits.has_value());
  ASSERT_EQ(static_cast<int64_t>(blocks->size()), n / traits->block_elements * traits->block_bytes);
  Status s = dequantize(static_cast<uint32_t>(c.type),
                        reinterpret_cast<const uint8_t*>(blocks->data()), n, got.data());
  ASSERT_TRUE(s.ok()) << s.message();
  // Same f32 operations in the same order as the reference; a fused
  // multiply-add may round once instead of twice, so allow 2 ulp.
  int64_t mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float e = expected[size_t(i)], g = got[size_t(i)];
    const float tol = 2.0f * std::nextafter(std::fabs(e), INFINITY) - 2.0f * std::fabs(e);
    if (!(std::fabs(g - e) <= std::max(tol, 1e-30f))) {
      if (++mismatches <= 5)
        ADD_FAILURE() << c.name << " element " << i << ": " << g << " vs " << e;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(
    AllTypes, GgufDequantTest,
    ::testing::Values(Case{"F32", GgmlType::kF32}, Case{"F16", GgmlType::kF16},
                      Case{"BF16", GgmlType::kBF16}, Case{"Q8_0", GgmlType::kQ8_0},
                      Case{"Q4_0", GgmlType::kQ4_0}, Case{"Q4_1", GgmlType::kQ4_1},
                      Case{"Q5_0", GgmlType::kQ5_0}, Case{"Q5_1", GgmlType::kQ5_1},
                      Case{"Q4_K", GgmlType::kQ4_K}, Case{"Q5_K", GgmlType::kQ5_K},
                      Case{"Q6_K", GgmlType::kQ6_K}),
    [](const auto& info) { return std::string(info.param.name); });

TEST(GgufDequantErrorsTest, UnsupportedTypeAndPartialBlock) {
  float out[256];
  const uint8_t zeros[512] = {};
  Status s = dequantize(static_cast<uint32_t>(GgmlType::kQ2_K), zeros, 256, out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("Q2_K is not supported"), std::string::npos) << s.message();
  s = dequantize(static_cast<uint32_t>(GgmlType::kQ8_0), zeros, 20, out);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("not whole Q8_0 blocks"), std::string::npos) << s.message();
  s = dequantize(19, zeros, 32, out);  // an i-quant id this build does not know
  EXPECT_NE(s.message().find("type 19"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace specstack::gguf
