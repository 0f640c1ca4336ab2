// The GGUF parser on well-formed files (every value type, arrays, tensors,
// alignment) and on malformed ones: each must be an Error naming the
// problem, never a crash or a huge allocation.
#include "gguf/gguf_file.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "gguf_builder.h"
#include "test_util.h"

namespace specstack::gguf {
namespace {

using specstack::testing::GgufBuilder;

std::string f32_bytes(std::initializer_list<float> values) {
  std::string out;
  for (float v : values) GgufBuilder::put(out, v);
  return out;
}

std::string parse_error(const std::string& bytes) {
  Result<Header> header = parse_gguf(bytes);
  return header.ok() ? std::string() : header.message();
}

TEST(GgufFileTest, ParsesEveryValueTypeAndTensors) {
  GgufBuilder b;
  b.u8("a.u8", 200).i8("a.i8", -5).u16("a.u16", 60000).i16("a.i16", -30000);
  b.u32("a.u32", 4000000000u).i32("a.i32", -7).f32("a.f32", 0.5f).boolean("a.bool", true);
  b.str("a.str", "héllo").u64("a.u64", 1ull << 40).i64("a.i64", -(1ll << 40)).f64("a.f64", 0.25);
  b.strings("a.strs", {"x", "", "yz"});
  b.numbers<float>("a.floats", 6, {1.5f, -2.0f});
  b.numbers<int32_t>("a.ints", 5, {3, -4, 5});
  // An array of arrays: [[1, 2], []] of uint8.
  std::string nested;
  GgufBuilder::put(nested, uint32_t{9});
  GgufBuilder::put(nested, uint64_t{2});
  GgufBuilder::put(nested, uint32_t{0});
  GgufBuilder::put(nested, uint64_t{2});
  nested += std::string("\x01\x02", 2);
  GgufBuilder::put(nested, uint32_t{0});
  GgufBuilder::put(nested, uint64_t{0});
  std::string key;
  GgufBuilder::put_string(key, "a.nested");
  GgufBuilder::put(key, uint32_t{9});
  b.raw_kv(key + nested);
  b.tensor("w", {2, 3}, 0, f32_bytes({1, 2, 3, 4, 5, 6}));
  b.tensor("v", {2}, 0, f32_bytes({7, 8}));
  const std::string bytes = b.build();
  Result<Header> h = parse_gguf(bytes);
  ASSERT_TRUE(h.ok()) << h.message();
  EXPECT_EQ(h->version, 3u);
  EXPECT_EQ(*h->get_int("a.u8"), 200);
  EXPECT_EQ(*h->get_int("a.i8"), -5);
  EXPECT_EQ(*h->get_int("a.u16"), 60000);
  EXPECT_EQ(*h->get_int("a.i16"), -30000);
  EXPECT_EQ(*h->get_int("a.u32"), 4000000000ll);
  EXPECT_EQ(*h->get_int("a.i32"), -7);
  EXPECT_EQ(*h->get_float("a.f32"), 0.5);
  EXPECT_TRUE(*h->get_bool("a.bool"));
  EXPECT_EQ(*h->get_string("a.str"), "héllo");
  EXPECT_EQ(*h->get_int("a.u64"), 1ll << 40);
  EXPECT_EQ(*h->get_int("a.i64"), -(1ll << 40));
  EXPECT_EQ(*h->get_float("a.f64"), 0.25);
  const Array* strs = *h->get_array("a.strs");
  EXPECT_EQ(strs->strings, (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ((*h->get_array("a.floats"))->floats, (std::vector<double>{1.5, -2.0}));
  EXPECT_EQ((*h->get_array("a.ints"))->ints, (std::vector<int64_t>{3, -4, 5}));
  const Array* n = *h->get_array("a.nested");
  ASSERT_EQ(n->size(), 2u);
  EXPECT_EQ(n->arrays[0].array->ints, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(n->arrays[1].array->size(), 0u);
  // Wrong-type and missing reads name the key.
  EXPECT_NE(h->get_string("a.u8").message().find("'a.u8' is uint8, expected a string"),
            std::string::npos);
  EXPECT_NE(h->get_int("nope").message().find("missing metadata key 'nope'"), std::string::npos);

  ASSERT_EQ(h->tensors.size(), 2u);
  const TensorInfo* w = h->find_tensor("w");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(w->nbytes, 24u);
  EXPECT_EQ(h->data_offset % 32, 0u);
  float first;
  std::memcpy(&first, bytes.data() + h->data_offset + w->offset, 4);
  EXPECT_EQ(first, 1.0f);
  EXPECT_EQ(h->find_tensor("v")->offset, 32u);  // 24 bytes, then padded to 32
}

TEST(GgufFileTest, HonoursGeneralAlignmentAndVersion2) {
  GgufBuilder b(2);
  b.alignment(64).tensor("a", {3}, 0, f32_bytes({1, 2, 3})).tensor("b", {1}, 0, f32_bytes({4}));
  Result<Header> h = parse_gguf(b.build());
  ASSERT_TRUE(h.ok()) << h.message();
  EXPECT_EQ(h->version, 2u);
  EXPECT_EQ(h->alignment, 64u);
  EXPECT_EQ(h->data_offset % 64, 0u);
  EXPECT_EQ(h->find_tensor("b")->offset, 64u);
}

TEST(GgufFileTest, QuantizedTensorSizes) {
  // Q4_K: 144 bytes per 256 elements; Q8_0: 34 per 32.
  GgufBuilder b;
  b.tensor("k", {256, 2}, 12, std::string(288, '\0')).tensor("q", {64}, 8, std::string(68, '\0'));
  Result<Header> h = parse_gguf(b.build());
  ASSERT_TRUE(h.ok()) << h.message();
  EXPECT_EQ(h->find_tensor("k")->nbytes, 288u);
  EXPECT_EQ(h->find_tensor("q")->nbytes, 68u);
  // A Q4_K row that is not whole blocks.
  GgufBuilder bad;
  bad.tensor("k", {128, 2}, 12, std::string(144, '\0'));
  EXPECT_NE(parse_error(bad.build()).find("not a multiple of 256"), std::string::npos);
}

TEST(GgufFileTest, EveryTruncationIsAnError) {
  GgufBuilder b;
  b.u32("x", 1)
      .str("s", "abc")
      .strings("t", {"p", "q"})
      .tensor("w", {4}, 0, f32_bytes({1, 2, 3, 4}));
  const std::string bytes = b.build();
  ASSERT_TRUE(parse_gguf(bytes).ok());
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_FALSE(parse_error(bytes.substr(0, n)).empty()) << "prefix of " << n << " bytes";
  }
}

struct BadCase {
  const char* what;
  std::string bytes;
  const char* message;
};

std::string header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
  std::string out = "GGUF";
  GgufBuilder::put(out, version);
  GgufBuilder::put(out, n_tensors);
  GgufBuilder::put(out, n_kv);
  return out;
}

std::string kv_prefix(const std::string& key, uint32_t type) {
  std::string out;
  GgufBuilder::put_string(out, key);
  GgufBuilder::put(out, type);
  return out;
}

TEST(GgufFileTest, MalformedFilesNameTheProblem) {
  std::vector<BadCase> cases;
  cases.push_back({"magic", "GGUX" + header(3, 0, 0).substr(4), "bad magic"});
  cases.push_back({"version 1", header(1, 0, 0), "version 1"});
  cases.push_back({"big endian", header(0x03000000, 0, 0), "big-endian"});
  cases.push_back({"version 9", header(9, 0, 0), "unsupported version 9"});
  cases.push_back({"huge kv count", header(3, 0, 1ull << 60), "metadata count"});
  cases.push_back({"huge tensor count", header(3, 1ull << 60, 0), "tensor count"});
  {
    std::string s = header(3, 0, 1);
    GgufBuilder::put(s, uint64_t{1} << 62);  // key length
    s += std::string(16, 'k');
    cases.push_back({"huge string", s, "has length"});
  }
  {
    std::string s = header(3, 0, 1) + kv_prefix("arr", 9);
    GgufBuilder::put(s, uint32_t{8});
    GgufBuilder::put(s, uint64_t{1} << 61);
    s += std::string(64, '\0');
    cases.push_back({"huge array", s, "array of"});
  }
  cases.push_back({"unknown value type", header(3, 0, 1) + kv_prefix("k", 13) + "xxxx",
                   "unknown value type 13"});
  {
    std::string s = header(3, 0, 1) + kv_prefix("b", 7) + "\x02";
    cases.push_back({"bool 2", s, "not 0 or 1"});
  }
  {
    std::string nest = header(3, 0, 1) + kv_prefix("deep", 9);
    for (int d = 0; d < 20; ++d) {
      GgufBuilder::put(nest, uint32_t{9});
      GgufBuilder::put(nest, uint64_t{1});
    }
    nest += std::string(64, '\0');
    cases.push_back({"deep nesting", nest, "nested deeper"});
  }
  {
    GgufBuilder b;
    b.u32("k", 1).u32("k", 2);
    cases.push_back({"duplicate key", b.build(), "duplicate metadata key 'k'"});
  }
  {
    GgufBuilder b;
    b.str("general.alignment", "32");
    cases.push_back({"alignment type", b.build(), "general.alignment is string"});
    GgufBuilder c;
    c.u32("general.alignment", 48);
    cases.push_back({"alignment value", c.build(), "not a power of two"});
  }
  {
    GgufBuilder b;
    b.tensor("w", {4}, 0, f32_bytes({1, 2, 3, 4})).tensor("w", {1}, 0, f32_bytes({1}));
    cases.push_back({"duplicate tensor", b.build(), "duplicate tensor name 'w'"});
  }
  {
    GgufBuilder b;
    b.tensor("w", {4}, 99, std::string(16, '\0'));
    cases.push_back({"unknown tensor type", b.build(), "unknown tensor type 99"});
  }
  {
    GgufBuilder b;
    b.tensor("w", {}, 0, "");
    cases.push_back({"zero dims", b.build(), "0 dimensions"});
    GgufBuilder c;
    c.tensor("w", {1, 1, 1, 1, 1}, 0, f32_bytes({1}));
    cases.push_back({"five dims", c.build(), "5 dimensions"});
    GgufBuilder d;
    d.tensor("w", {1ull << 40, 1ull << 40}, 0, "");
    cases.push_back({"dim overflow", d.build(), "overflowing dimension"});
    GgufBuilder e;
    e.tensor("w", {0}, 0, "");
    cases.push_back({"zero dim", e.build(), "invalid or overflowing dimension 0"});
  }
  {
    GgufBuilder b;
    b.tensor("w", {4}, 0, f32_bytes({1, 2, 3, 4}), 8);
    cases.push_back({"misaligned", b.build(), "not a multiple of the alignment"});
    GgufBuilder c;
    c.tensor("w", {4}, 0, f32_bytes({1, 2, 3, 4}), 1 << 20);
    cases.push_back({"past end", c.build(), "runs past the end"});
    GgufBuilder d;
    d.tensor("a", {16}, 0, std::string(64, '\0')).tensor("b", {4}, 0, "", 32);
    cases.push_back({"overlap", d.build(), "overlap"});
  }
  for (const BadCase& c : cases) {
    const std::string error = parse_error(c.bytes);
    EXPECT_NE(error.find(c.message), std::string::npos)
        << c.what << ": got '" << error << "', expected it to contain '" << c.message << "'";
  }
}

TEST(GgufFileTest, OpenMapsAFileAndRecognisesTheMagic) {
  const std::string path = ::testing::TempDir() + "/gguf_file_test.gguf";
  GgufBuilder b;
  b.str("general.architecture", "llama").tensor("w", {2}, 0, f32_bytes({3, 4}));
  const std::string bytes = b.build();
  FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  EXPECT_TRUE(is_gguf_file(path));
  EXPECT_FALSE(is_gguf_file(specstack::testing::golden_model_dir("qwen2") + "/config.json"));
  EXPECT_FALSE(is_gguf_file(specstack::testing::golden_model_dir("qwen2")));
  Result<GgufFile> file = GgufFile::open(path);
  ASSERT_TRUE(file.ok()) << file.message();
  const TensorInfo* w = file->header().find_tensor("w");
  float values[2];
  std::memcpy(values, file->tensor_data(*w), 8);
  EXPECT_EQ(values[1], 4.0f);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace specstack::gguf
