// Python str semantics the chat templates rely on (values as CPython 3.11 prints them).
#include "chat/py_string.h"

#include <gtest/gtest.h>

#include <limits>

namespace specstack::jinja {
namespace {

TEST(PyString, FloatReprMatchesCPython) {
  const std::pair<double, const char*> cases[] = {
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {1.0, "1.0"},
      {0.1, "0.1"},
      {1.0 / 3.0, "0.3333333333333333"},
      {123456789.123, "123456789.123"},
      {1e16, "1e+16"},
      {9999999999999998.0, "9999999999999998.0"},
      {1234567890123456.7, "1234567890123456.8"},
      {1e-5, "1e-05"},
      {0.00012, "0.00012"},
      {5e-324, "5e-324"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {std::numeric_limits<double>::infinity(), "inf"},
      {std::numeric_limits<double>::quiet_NaN(), "nan"},
  };
  for (const auto& [value, expected] : cases) EXPECT_EQ(py_float_repr(value), expected) << expected;
}

TEST(PyString, SplitFamilies) {
  using V = std::vector<std::string>;
  EXPECT_EQ(py_split(" a  b \u3000c ", std::nullopt, 1), (V{"a", "b \u3000c "}));
  EXPECT_EQ(py_split(" a  b ", std::nullopt, -1), (V{"a", "b"}));
  EXPECT_EQ(py_split("a,b,,c", std::string(","), -1), (V{"a", "b", "", "c"}));
  EXPECT_EQ(py_split("", std::string(","), -1), (V{""}));
  EXPECT_EQ(py_split("   ", std::nullopt, -1), V{});
  EXPECT_EQ(py_rsplit(" a b ", std::nullopt, 1), (V{" a", "b"}));
  EXPECT_EQ(py_rsplit("a,b,c", std::string(","), 1), (V{"a,b", "c"}));
  EXPECT_EQ(py_splitlines("a\r\nb\rc\x0b"
                          "d\u2028"
                          "e\n"),
            (V{"a", "b", "c", "d", "e"}));
}

TEST(PyString, StripUsesUnicodeWhitespace) {
  EXPECT_EQ(py_strip(" \u3000\u00a0x y\t\n", std::nullopt, true, true), "x y");
  EXPECT_EQ(py_strip("\n\nx\n", std::nullopt, true, false), "x\n");
  EXPECT_EQ(py_strip("xxaxx", std::string("x"), true, true), "a");
  EXPECT_EQ(py_strip("éaé", std::string("é"), false, true), "éa");
}

TEST(PyString, ReplaceAndCase) {
  EXPECT_EQ(py_replace("abc", "", "-", 2), "-a-bc");
  EXPECT_EQ(py_replace("héllo", "", "|", -1), "|h|é|l|l|o|");
  EXPECT_EQ(py_replace("aaa", "a", "bb", -1), "bbbbbb");
  EXPECT_EQ(py_title("hello WORLD 1st x-ray"), "Hello World 1St X-Ray");
  EXPECT_EQ(py_capitalize("hELLO wORLD"), "Hello world");
  EXPECT_EQ(py_upper("straße é"), "STRASSE É");
  EXPECT_EQ(py_lower("ÀÉ ПРИВЕТ Ω"), "àé привет ω");
  EXPECT_TRUE(py_islower("abc1"));
  EXPECT_FALSE(py_islower("123"));
}

TEST(PyString, ReprQuotesAndEscapes) {
  EXPECT_EQ(py_repr_string("it's"), "\"it's\"");
  EXPECT_EQ(py_repr_string("a\"b'c"), "'a\"b\\'c'");
  EXPECT_EQ(py_repr_string(std::string("\0\x7f\u00a0\u200b\U0001F600\u00e9", 13)),
            "'\\x00\\x7f\\xa0\\u200b\U0001F600\u00e9'");
}

TEST(PyString, InvalidUtf8RoundTripsAndCountsPerByte) {
  const std::string bad = "a\xff\xc3(b";
  EXPECT_EQ(encode_utf8(decode_utf8(bad)), bad);
  EXPECT_EQ(utf8_length(bad), 5u);
  EXPECT_EQ(utf8_length("héllo😀"), 6u);
}

}  // namespace
}  // namespace specstack::jinja
