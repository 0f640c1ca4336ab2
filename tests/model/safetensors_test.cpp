#include "model/safetensors.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace specstack {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using specstack::testing::golden_model_dir;

template <typename T>
std::string raw_bytes(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

// 8-byte little-endian length + header text + data section.
std::string with_header(const std::string& header, const std::string& data, uint64_t length_field) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((length_field >> (8 * i)) & 0xff);
  return out + header + data;
}
std::string with_header(const std::string& header, const std::string& data = "") {
  return with_header(header, data, header.size());
}

struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};

// A well-formed file: tensors stored back to back in the given order, the
// header padded with spaces to a multiple of 8 as the HF writer does.
std::string make_safetensors(const std::vector<RawTensor>& tensors, const json& metadata = json()) {
  json header = json::object();
  std::string data;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  if (!metadata.is_null()) header["__metadata__"] = metadata;
  std::string text = header.dump();
  text.resize((text.size() + 7) / 8 * 8, ' ');
  return with_header(text, data);
}

class SafetensorsFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = (fs::temp_directory_path() /
            ("specstack_st_" + std::to_string(::getpid()) + "_" + info->name()))
               .string();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  void write(const std::string& name, const std::string& bytes) {
    std::ofstream out(dir_ + "/" + name, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    ASSERT_TRUE(out.good());
  }

  std::string dir_;
};

const std::vector<float> kMatrix = {1, 2, 3, 4, 5, 6};

TEST_F(SafetensorsFileTest, ReadsViewsOfEveryDtype) {
  std::vector<uint16_t> bf16 = {f32_to_bf16(1.5f), f32_to_bf16(-2.0f), f32_to_bf16(0.25f),
                                f32_to_bf16(8.0f)};
  std::vector<uint16_t> f16 = {f32_to_f16(0.5f), f32_to_f16(-1.0f), f32_to_f16(3.0f),
                               f32_to_f16(100.0f)};
  write("model.safetensors",
        make_safetensors({{"w", "F32", {2, 3}, raw_bytes(kMatrix)},
                          {"b", "BF16", {4}, raw_bytes(bf16)},
                          {"h", "F16", {2, 2}, raw_bytes(f16)},
                          {"ids", "I32", {3}, raw_bytes(std::vector<int32_t>{7, -1, 42})}},
                         {{"format", "pt"}}));
  Result<WeightFiles> files = WeightFiles::open(dir_);
  ASSERT_TRUE(files.ok()) << files.message();
  EXPECT_EQ(files->names(), (std::vector<std::string>{"b", "h", "ids", "w"}));
  EXPECT_TRUE(files->contains("w"));
  EXPECT_FALSE(files->contains("x"));
  EXPECT_EQ(files->metadata().at("format"), "pt");
  EXPECT_EQ(files->total_bytes(), 24u + 8u + 8u + 12u);

  Result<Tensor> w = files->get("w");
  ASSERT_TRUE(w.ok()) << w.message();
  EXPECT_EQ(w->dtype(), DType::kF32);
  EXPECT_EQ(w->shape(), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::vector<float>(w->f32(), w->f32() + 6), kMatrix);
  // Zero-copy: two lookups see the same mapped bytes.
  EXPECT_EQ(files->get("w")->raw(), w->raw());

  Tensor b = files->get("b").value();
  EXPECT_EQ(b.dtype(), DType::kBF16);
  EXPECT_EQ(bf16_to_f32(b.data<uint16_t>()[1]), -2.0f);
  Tensor h = files->get("h").value();
  EXPECT_EQ(h.dtype(), DType::kF16);
  EXPECT_EQ(f16_to_f32(h.data<uint16_t>()[3]), 100.0f);
  Tensor ids = files->get("ids").value();
  EXPECT_EQ(ids.dtype(), DType::kI32);
  EXPECT_EQ(ids.data<int32_t>()[2], 42);

  Result<Tensor> missing = files->get("nope");
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.message().find("'nope'"), std::string::npos);
}

TEST_F(SafetensorsFileTest, ViewsOutliveTheWeightFiles) {
  write("model.safetensors", make_safetensors({{"w", "F32", {6}, raw_bytes(kMatrix)}}));
  Tensor w;
  {
    Result<WeightFiles> files = WeightFiles::open(dir_ + "/model.safetensors");
    ASSERT_TRUE(files.ok()) << files.message();
    w = files->get("w").value();
  }
  EXPECT_EQ(w.f32()[5], 6.0f);
}

TEST_F(SafetensorsFileTest, UnalignedTensorIsCopiedAligned) {
  // A 1-element F16 first puts the F32 tensor at data offset 2.
  write("model.safetensors", make_safetensors({{"pad", "F16", {1}, std::string(2, '\0')},
                                               {"w", "F32", {6}, raw_bytes(kMatrix)}}));
  Result<WeightFiles> files = WeightFiles::open(dir_);
  ASSERT_TRUE(files.ok()) << files.message();
  Tensor w = files->get("w").value();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.raw()) % alignof(float), 0u);
  EXPECT_EQ(std::vector<float>(w.f32(), w.f32() + 6), kMatrix);
}

TEST(SafetensorsHeaderTest, KeepsHeaderOrderAndEdgeShapes) {
  std::string file = with_header(
      R"({"z": {"dtype": "F32", "shape": [], "data_offsets": [0, 4]},)"
      R"( "empty": {"dtype": "BF16", "shape": [3, 0], "data_offsets": [4, 4]},)"
      R"( "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}, "__metadata__": {}})",
      std::string(8, '\0'));
  Result<SafetensorsHeader> header = parse_safetensors_header(file);
  ASSERT_TRUE(header.ok()) << header.message();
  ASSERT_EQ(header->tensors.size(), 3u);
  EXPECT_EQ(header->tensors[0].name, "z");
  EXPECT_TRUE(header->tensors[0].shape.empty());
  EXPECT_EQ(header->tensors[1].name, "empty");
  EXPECT_EQ(header->tensors[1].shape, (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(header->tensors[2].name, "a");
  EXPECT_EQ(header->tensors[2].begin, 4u);
  EXPECT_EQ(header->tensors[2].end, 8u);
  EXPECT_EQ(header->data_offset, file.size() - 8);
}

TEST(SafetensorsHeaderTest, GoldenFiles) {
  Result<WeightFiles> tiny = WeightFiles::open(golden_model_dir("tinystories-656k"));
  ASSERT_TRUE(tiny.ok()) << tiny.message();
  EXPECT_TRUE(tiny->contains("lm_head.weight"));
  EXPECT_FALSE(tiny->contains("model.embed_tokens.weight"));
  EXPECT_EQ(tiny->metadata().at("model.embed_tokens.weight"), "lm_head.weight");
  EXPECT_EQ(tiny->get("lm_head.weight")->shape(), (std::vector<int64_t>{2048, 128}));

  Result<WeightFiles> ref =
      WeightFiles::open(golden_model_dir("llama-gqa") + "/reference.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.message();
  EXPECT_EQ(ref->get("p0.input_ids")->dtype(), DType::kI32);
  EXPECT_EQ(ref->get("p0.input_ids")->shape(), (std::vector<int64_t>{5}));
}

TEST_F(SafetensorsFileTest, ShardedIndex) {
  write("model-00001-of-00002.safetensors",
        make_safetensors({{"a", "F32", {6}, raw_bytes(kMatrix)},
                          {"unlisted", "F32", {1}, raw_bytes(std::vector<float>{9})}},
                         {{"format", "pt"}}));
  write(
      "model-00002-of-00002.safetensors",
      make_safetensors({{"b", "F32", {2}, raw_bytes(std::vector<float>{7, 8})}}, {{"shard", "2"}}));
  json index = {
      {"metadata", {{"total_size", 32}}},
      {"weight_map",
       {{"a", "model-00001-of-00002.safetensors"}, {"b", "model-00002-of-00002.safetensors"}}}};
  write("model.safetensors.index.json", index.dump());
  Result<WeightFiles> files = WeightFiles::open(dir_);
  ASSERT_TRUE(files.ok()) << files.message();
  EXPECT_EQ(files->names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(files->get("a")->f32()[2], 3.0f);
  EXPECT_EQ(files->get("b")->f32()[1], 8.0f);
  EXPECT_EQ(files->metadata().at("format"), "pt");
  EXPECT_EQ(files->metadata().at("shard"), "2");
  EXPECT_EQ(files->total_bytes(), 32u);
}

struct CorruptHeader {
  const char* what;
  std::string file;
  const char* expected;  // substring of the error message
};

std::string entry_file(const std::string& entry_json, size_t data_bytes = 16) {
  return with_header(R"({"x": )" + entry_json + "}", std::string(data_bytes, '\0'));
}

TEST(SafetensorsHeaderTest, CorruptHeadersAreErrors) {
  const CorruptHeader cases[] = {
      {"empty file", "", "shorter than the 8-byte header length"},
      {"5 bytes", std::string(5, '\x01'), "shorter than the 8-byte"},
      {"length past end", with_header("{}", "", 1000), "runs past the end of the file"},
      {"absurd length", with_header("{}", "", uint64_t{1} << 63), "implausibly large"},
      {"zero length", with_header("", ""), "not a JSON object"},
      {"not json", with_header("hello world"), "not a JSON object"},
      {"bad json", with_header("{\"x\": {"), "not valid JSON"},
      {"array", with_header("[1, 2]"), "not a JSON object"},
      {"invalid utf8", with_header("{\"\xff\": 1}"), "not valid JSON"},
      {"entry not object", entry_file("5"), "tensor 'x': entry must be an object"},
      {"no dtype", entry_file(R"({"shape": [1], "data_offsets": [0, 4]})"), "missing 'dtype'"},
      {"no shape", entry_file(R"({"dtype": "F32", "data_offsets": [0, 4]})"), "missing 'shape'"},
      {"no offsets", entry_file(R"({"dtype": "F32", "shape": [1]})"), "missing 'data_offsets'"},
      {"dtype type", entry_file(R"({"dtype": 5, "shape": [1], "data_offsets": [0, 4]})"),
       "'dtype' must be a string"},
      {"dtype I64", entry_file(R"({"dtype": "I64", "shape": [1], "data_offsets": [0, 8]})"),
       "tensor 'x' has dtype I64; supported: F32, BF16, F16, F8_E4M3, I32"},
      {"negative dim", entry_file(R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]})"),
       "'shape' entries must be non-negative integers"},
      {"float dim", entry_file(R"({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]})"),
       "'shape'"},
      {"shape string", entry_file(R"({"dtype": "F32", "shape": "1", "data_offsets": [0, 4]})"),
       "'shape' must be an array"},
      {"numel overflow",
       entry_file(R"({"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]})"),
       "overflows"},
      {"overflow before zero",
       entry_file(
           R"({"dtype": "F32", "shape": [4611686018427387904, 4, 0], "data_offsets": [0, 0]})"),
       "overflows"},
      {"huge dim",
       entry_file(R"({"dtype": "F32", "shape": [18446744073709551615, 0], )"
                  R"("data_offsets": [0, 0]})"),
       "overflows"},
      {"bytes overflow",
       entry_file(R"({"dtype": "F32", "shape": [4611686018427387904], "data_offsets": [0, 0]})"),
       "byte size overflows"},
      {"one offset", entry_file(R"({"dtype": "F32", "shape": [1], "data_offsets": [0]})"),
       "'data_offsets' must be [begin, end]"},
      {"string offset", entry_file(R"({"dtype": "F32", "shape": [1], "data_offsets": [0, "4"]})"),
       "'data_offsets'"},
      {"negative offset", entry_file(R"({"dtype": "F32", "shape": [1], "data_offsets": [-4, 0]})"),
       "'data_offsets'"},
      {"end before begin", entry_file(R"({"dtype": "F32", "shape": [0], "data_offsets": [8, 4]})"),
       "end before begin"},
      {"size mismatch", entry_file(R"({"dtype": "F32", "shape": [2], "data_offsets": [0, 4]})"),
       "hold 4 bytes but F32 x [2] needs 8"},
      {"out of range", entry_file(R"({"dtype": "F32", "shape": [2], "data_offsets": [12, 20]})"),
       "run past the data section (16 bytes"},
      {"overlap",
       with_header(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                   R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                   std::string(16, '\0')),
       "tensors 'a' [0, 8] and 'b' [4, 12] overlap"},
      {"duplicate",
       with_header(R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                   R"( "a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
                   std::string(8, '\0')),
       "duplicate header key 'a'"},
      {"metadata not object", with_header(R"({"__metadata__": []})"), "'__metadata__' must be"},
      {"metadata number", with_header(R"({"__metadata__": {"k": 1}})"),
       "'__metadata__' value of 'k' must be a string"},
  };
  for (const CorruptHeader& c : cases) {
    Result<SafetensorsHeader> header = parse_safetensors_header(c.file);
    ASSERT_FALSE(header.ok()) << c.what;
    EXPECT_NE(header.message().find(c.expected), std::string::npos)
        << c.what << ": " << header.message() << "\nexpected to contain: " << c.expected;
  }
}

TEST_F(SafetensorsFileTest, TruncatedFileNamesTheFile) {
  std::string good = make_safetensors({{"w", "F32", {6}, raw_bytes(kMatrix)}});
  write("model.safetensors", good.substr(0, good.size() - 4));
  Result<WeightFiles> files = WeightFiles::open(dir_);
  ASSERT_FALSE(files.ok());
  EXPECT_NE(files.message().find(dir_ + "/model.safetensors"), std::string::npos)
      << files.message();
  EXPECT_NE(files.message().find("truncated"), std::string::npos) << files.message();
}

TEST_F(SafetensorsFileTest, BadFolderLayoutsAreErrors) {
  Result<WeightFiles> empty = WeightFiles::open(dir_);
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.message().find("no model.safetensors"), std::string::npos) << empty.message();

  write("shard1.safetensors", make_safetensors({{"a", "F32", {6}, raw_bytes(kMatrix)}}));
  struct IndexCase {
    json index;
    const char* expected;
  };
  const IndexCase cases[] = {
      {{{"weight_map", {{"a", "shard1.safetensors"}, {"b", "shard2.safetensors"}}}},
       "shard 'shard2.safetensors' (holding 'b') is missing"},
      {{{"weight_map", {{"a", "shard1.safetensors"}, {"ghost", "shard1.safetensors"}}}},
       "tensor 'ghost' in"},
      {{{"weight_map", {{"a", "../shard1.safetensors"}}}}, "must be a file name"},
      {{{"weight_map", {{"a", 3}}}}, "weight_map['a']"},
      {{{"metadata", json::object()}}, "'weight_map' must be an object"},
      {json::array(), "top level must be a JSON object"},
  };
  for (const IndexCase& c : cases) {
    write("model.safetensors.index.json", c.index.dump());
    Result<WeightFiles> files = WeightFiles::open(dir_);
    ASSERT_FALSE(files.ok()) << c.index.dump();
    EXPECT_NE(files.message().find(c.expected), std::string::npos)
        << files.message() << "\nexpected to contain: " << c.expected;
    EXPECT_NE(files.message().find("model.safetensors.index.json"), std::string::npos);
  }
  write("model.safetensors.index.json", "{\"weight_map\": ");
  Result<WeightFiles> bad_json = WeightFiles::open(dir_);
  ASSERT_FALSE(bad_json.ok());
  EXPECT_NE(bad_json.message().find("invalid JSON"), std::string::npos) << bad_json.message();

  // A shard that is itself corrupt is reported with its own path.
  write("shard1.safetensors", "junk");
  write("model.safetensors.index.json", json{{"weight_map", {{"a", "shard1.safetensors"}}}}.dump());
  Result<WeightFiles> corrupt = WeightFiles::open(dir_);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_NE(corrupt.message().find("shard1.safetensors: file is 4 bytes"), std::string::npos)
      << corrupt.message();
}

}  // namespace
}  // namespace specstack
