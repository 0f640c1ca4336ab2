// safetensors: 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}},
// then the data section that the offsets index. Everything in the header is
// untrusted: each check below turns a bad byte into a message, never a crash
// or a read outside the file.
//
// Choices the format leaves open:
// * "__metadata__" must map strings to strings (as in the reference Rust
//   implementation); any other value is an error.
// * Gaps between tensors and bytes after the last tensor are allowed; overlaps
//   are not.
#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>

#include "base/check.h"

namespace specstack {

namespace {

using nlohmann::json;

// The reference implementation's limit; a real header is a few hundred KB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

// Tensor names and dtypes come from the file: keep messages printable and short.
std::string printable(std::string_view text, size_t max_len = 80) {
  std::string out;
  for (char c : text.substr(0, max_len)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (text.size() > max_len) out += "...";
  return out;
}

std::optional<DType> parse_dtype_name(const std::string& name) {
  if (name == "F32") return DType::kF32;
  if (name == "BF16") return DType::kBF16;
  if (name == "F16") return DType::kF16;
  if (name == "F8_E4M3") return DType::kF8E4M3;
  if (name == "I32") return DType::kI32;  // reference tensors (token ids)
  return std::nullopt;
}

// A non-negative JSON integer, or nullopt.
std::optional<uint64_t> as_u64(const json& value) {
  if (value.is_number_unsigned()) return value.get<uint64_t>();
  if (value.is_number_integer() && value.get<int64_t>() >= 0) {
    return static_cast<uint64_t>(value.get<int64_t>());
  }
  return std::nullopt;
}

Result<SafetensorsEntry> parse_entry(const std::string& name, const json& value,
                                     uint64_t data_size) {
  std::string who = "tensor '" + printable(name) + "'";
  if (!value.is_object())
    return errorf("{}: entry must be an object, got {}", who, value.type_name());
  SafetensorsEntry entry;
  entry.name = name;

  auto dtype_it = value.find("dtype");
  if (dtype_it == value.end()) return errorf("{}: missing 'dtype'", who);
  if (!dtype_it->is_string()) return errorf("{}: 'dtype' must be a string", who);
  const std::string& dtype_name = dtype_it->get_ref<const std::string&>();
  std::optional<DType> dtype = parse_dtype_name(dtype_name);
  if (!dtype) {
    return errorf("{} has dtype {}; supported: F32, BF16, F16, F8_E4M3, I32", who,
                  printable(dtype_name));
  }
  entry.dtype = *dtype;

  auto shape_it = value.find("shape");
  if (shape_it == value.end()) return errorf("{}: missing 'shape'", who);
  if (!shape_it->is_array()) return errorf("{}: 'shape' must be an array of integers", who);
  // numel is built the way Tensor::numel() multiplies (left to right in
  // int64), so no later product over this shape can overflow.
  int64_t numel = 1;
  for (const json& dim_value : *shape_it) {
    std::optional<uint64_t> dim = as_u64(dim_value);
    if (!dim) return errorf("{}: 'shape' entries must be non-negative integers", who);
    if (*dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(numel, static_cast<int64_t>(*dim), &numel)) {
      return errorf("{}: 'shape' element count overflows", who);
    }
    entry.shape.push_back(static_cast<int64_t>(*dim));
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(static_cast<uint64_t>(numel), dtype_size(entry.dtype), &nbytes)) {
    return errorf("{}: byte size overflows", who);
  }

  auto offsets_it = value.find("data_offsets");
  if (offsets_it == value.end()) return errorf("{}: missing 'data_offsets'", who);
  std::optional<uint64_t> begin, end;
  if (offsets_it->is_array() && offsets_it->size() == 2) {
    begin = as_u64((*offsets_it)[0]);
    end = as_u64((*offsets_it)[1]);
  }
  if (!begin || !end) {
    return errorf("{}: 'data_offsets' must be [begin, end] (two non-negative integers)", who);
  }
  entry.begin = *begin;
  entry.end = *end;
  if (entry.end < entry.begin) {
    return errorf("{}: data_offsets [{}, {}] end before begin", who, entry.begin, entry.end);
  }
  if (entry.end - entry.begin != nbytes) {
    return errorf("{}: data_offsets [{}, {}] hold {} bytes but {} x {} needs {}", who, entry.begin,
                  entry.end, entry.end - entry.begin, dtype_name, shape_it->dump(), nbytes);
  }
  if (entry.end > data_size) {
    return errorf("{}: data_offsets [{}, {}] run past the data section ({} bytes; truncated file?)",
                  who, entry.begin, entry.end, data_size);
  }
  return entry;
}

Status parse_metadata(const json& value, std::map<std::string, std::string>& metadata) {
  if (!value.is_object()) {
    return errorf("'__metadata__' must be an object, got {}", value.type_name());
  }
  for (const auto& [key, item] : value.items()) {
    if (!item.is_string()) {
      return errorf("'__metadata__' value of '{}' must be a string, got {}", printable(key),
                    item.type_name());
    }
    metadata[key] = item.get<std::string>();
  }
  return Status::ok_status();
}

Status check_no_overlap(const std::vector<SafetensorsEntry>& tensors) {
  std::vector<const SafetensorsEntry*> by_offset;
  for (const SafetensorsEntry& t : tensors) {
    if (t.end > t.begin) by_offset.push_back(&t);  // empty tensors occupy no bytes
  }
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    if (by_offset[i]->begin < by_offset[i - 1]->end) {
      return errorf("tensors '{}' [{}, {}] and '{}' [{}, {}] overlap",
                    printable(by_offset[i - 1]->name), by_offset[i - 1]->begin,
                    by_offset[i - 1]->end, printable(by_offset[i]->name), by_offset[i]->begin,
                    by_offset[i]->end);
    }
  }
  return Status::ok_status();
}

Result<SafetensorsHeader> parse_header_json(std::string_view text, uint64_t data_size) {
  // The DOM drops duplicate keys and reorders the rest, so the callback
  // records the top-level keys as they appear.
  std::vector<std::string> keys;
  std::optional<std::string> duplicate;
  auto on_event = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) {
      const std::string& key = parsed.get_ref<const std::string&>();
      if (!duplicate && std::find(keys.begin(), keys.end(), key) != keys.end()) duplicate = key;
      keys.push_back(key);
    }
    return true;
  };
  json root;
  try {
    root = json::parse(text.begin(), text.end(), on_event);
  } catch (const json::parse_error& e) {
    std::string what = e.what();
    size_t bracket = what.find("] ");
    if (bracket != std::string::npos) what = what.substr(bracket + 2);
    return errorf("header is not valid JSON (at byte {} of the header): {}", e.byte,
                  printable(what, 200));
  }
  if (!root.is_object()) return errorf("header must be a JSON object, got {}", root.type_name());
  if (duplicate) return errorf("duplicate header key '{}'", printable(*duplicate));

  SafetensorsHeader header;
  for (const std::string& key : keys) {
    const json& value = root.at(key);
    if (key == "__metadata__") {
      SS_TRY(parse_metadata(value, header.metadata));
      continue;
    }
    SS_ASSIGN_OR_RETURN(SafetensorsEntry entry, parse_entry(key, value, data_size));
    header.tensors.push_back(std::move(entry));
  }
  SS_TRY(check_no_overlap(header.tensors));
  return header;
}

}  // namespace

Result<SafetensorsHeader> parse_safetensors_header(std::string_view file) {
  if (file.size() < 8) {
    return errorf("file is {} bytes, shorter than the 8-byte header length", file.size());
  }
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) {
    header_len = (header_len << 8) | static_cast<uint8_t>(file[static_cast<size_t>(i)]);
  }
  if (header_len > kMaxHeaderBytes) {
    return errorf("header length {} is implausibly large (max {})", header_len, kMaxHeaderBytes);
  }
  if (header_len > file.size() - 8) {
    return errorf("header length {} runs past the end of the file ({} bytes)", header_len,
                  file.size());
  }
  std::string_view text = file.substr(8, header_len);
  // The format requires an object; checking here also keeps junk such as
  // deeply nested arrays away from the JSON parser.
  size_t first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos || text[first] != '{') {
    return make_error("header is not a JSON object (does not start with '{')");
  }
  uint64_t data_offset = 8 + header_len;
  try {
    SS_ASSIGN_OR_RETURN(SafetensorsHeader header,
                        parse_header_json(text, file.size() - data_offset));
    header.data_offset = data_offset;
    return header;
  } catch (const std::exception& e) {
    // Unforeseen library exceptions (or bad_alloc) must not escape on untrusted input.
    return errorf("cannot parse header: {}", printable(e.what(), 200));
  }
}

namespace {

// One mapped safetensors file with its validated header. Errors name the path.
struct OpenedFile {
  std::shared_ptr<MappedFile> file;
  SafetensorsHeader header;
};

Result<OpenedFile> open_safetensors(const std::string& path) {
  SS_ASSIGN_OR_RETURN(std::shared_ptr<MappedFile> file, MappedFile::open(path));
  Result<SafetensorsHeader> header = parse_safetensors_header(file->bytes());
  if (!header.ok()) return errorf("{}: {}", path, header.message());
  return OpenedFile{std::move(file), std::move(header).value()};
}

// Shard names come from an untrusted index: plain file names in the model
// folder only, so an index cannot point the loader elsewhere.
bool is_plain_file_name(const std::string& name) {
  return !name.empty() && name != "." && name != ".." &&
         name.find_first_of("/\\") == std::string::npos && name.find('\0') == std::string::npos;
}

// weight_map of model.safetensors.index.json: tensor name -> shard file.
Result<std::map<std::string, std::string>> read_weight_map(const std::string& index_path) {
  SS_ASSIGN_OR_RETURN(std::string text, read_text_file(index_path));
  try {
    json root;
    try {
      root = json::parse(text);
    } catch (const json::parse_error& e) {
      return errorf("{}: invalid JSON at byte {}", index_path, e.byte);
    }
    if (!root.is_object()) return errorf("{}: top level must be a JSON object", index_path);
    auto map_it = root.find("weight_map");
    if (map_it == root.end() || !map_it->is_object()) {
      return errorf("{}: 'weight_map' must be an object of tensor name -> shard file", index_path);
    }
    std::map<std::string, std::string> weight_map;
    for (const auto& [name, shard] : map_it->items()) {
      if (!shard.is_string() || !is_plain_file_name(shard.get<std::string>())) {
        return errorf("{}: weight_map['{}'] must be a file name in the model folder", index_path,
                      printable(name));
      }
      weight_map[name] = shard.get<std::string>();
    }
    return weight_map;
  } catch (const std::exception& e) {
    return errorf("{}: cannot parse: {}", index_path, printable(e.what(), 200));
  }
}

}  // namespace

Result<WeightFiles> WeightFiles::open(const std::string& model_dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  WeightFiles weights;
  auto add_file = [&weights](OpenedFile opened) {
    for (const auto& [key, value] : opened.header.metadata) weights.metadata_.insert({key, value});
    weights.files_.push_back(std::move(opened.file));
    weights.data_offsets_.push_back(opened.header.data_offset);
    return weights.files_.size() - 1;
  };

  // A single file: <dir>/model.safetensors, or a path to any .safetensors file.
  std::string single =
      fs::is_regular_file(model_dir, ec) ? model_dir : model_dir + "/model.safetensors";
  if (fs::is_regular_file(single, ec)) {
    SS_ASSIGN_OR_RETURN(OpenedFile opened, open_safetensors(single));
    std::vector<SafetensorsEntry> tensors = std::move(opened.header.tensors);
    size_t file_index = add_file(std::move(opened));
    for (SafetensorsEntry& entry : tensors) {
      std::string name = entry.name;
      weights.index_.emplace(std::move(name), Location{file_index, std::move(entry)});
    }
    return weights;
  }

  std::string index_path = model_dir + "/model.safetensors.index.json";
  if (!fs::is_regular_file(index_path, ec)) {
    return errorf("{}: no model.safetensors or model.safetensors.index.json", model_dir);
  }
  SS_ASSIGN_OR_RETURN(auto weight_map, read_weight_map(index_path));
  std::map<std::string, std::vector<std::string>> names_by_shard;
  for (const auto& [name, shard] : weight_map) names_by_shard[shard].push_back(name);
  for (const auto& [shard, names] : names_by_shard) {
    std::string shard_path = model_dir + "/" + shard;
    if (!fs::is_regular_file(shard_path, ec)) {
      return errorf("{}: shard '{}' (holding '{}') is missing: {} not found", index_path,
                    printable(shard), printable(names.front()), shard_path);
    }
    SS_ASSIGN_OR_RETURN(OpenedFile opened, open_safetensors(shard_path));
    std::unordered_map<std::string, SafetensorsEntry> in_shard;
    for (SafetensorsEntry& entry : opened.header.tensors) in_shard.emplace(entry.name, entry);
    size_t file_index = add_file(std::move(opened));
    for (const std::string& name : names) {
      auto it = in_shard.find(name);
      if (it == in_shard.end()) {
        return errorf("{}: weight_map puts tensor '{}' in {}, which has no such tensor", index_path,
                      printable(name), shard_path);
      }
      weights.index_.emplace(name, Location{file_index, it->second});
    }
  }
  return weights;
}

bool WeightFiles::contains(const std::string& name) const {
  return index_.count(name) != 0;
}

Result<Tensor> WeightFiles::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end())
    return errorf("no tensor named '{}' in the weight files", printable(name));
  const Location& loc = it->second;
  const std::shared_ptr<MappedFile>& file = files_[loc.file_index];
  // Read-only mapping: the const_cast only fits Tensor's interface; writing
  // through a weight view would fault.
  auto* data = const_cast<uint8_t*>(file->data()) + data_offsets_[loc.file_index] + loc.entry.begin;
  size_t elem = dtype_size(loc.entry.dtype);
  if (reinterpret_cast<uintptr_t>(data) % elem == 0) {
    return Tensor::view(data, loc.entry.dtype, loc.entry.shape, file);
  }
  // The format allows unaligned tensors (the HF writer never makes them);
  // kernels read whole elements, so give them an aligned copy.
  Tensor copy = Tensor::zeros(loc.entry.dtype, loc.entry.shape);
  std::memcpy(copy.raw(), data, loc.entry.end - loc.entry.begin);
  return copy;
}

std::vector<std::string> WeightFiles::names() const {
  std::vector<std::string> out;
  out.reserve(index_.size());
  for (const auto& [name, loc] : index_) out.push_back(name);
  std::sort(out.begin(), out.end());
  return out;
}

size_t WeightFiles::total_bytes() const {
  size_t total = 0;
  for (const auto& [name, loc] : index_) total += loc.entry.end - loc.entry.begin;
  return total;
}

}  // namespace specstack
