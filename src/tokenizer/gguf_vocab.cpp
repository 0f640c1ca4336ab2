#include "tokenizer/gguf_vocab.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <unordered_map>

namespace specstack {
namespace {

using nlohmann::json;

// llama.cpp's llama_token_type values (tokenizer.ggml.token_type).
enum TokenType : int64_t {
  kNormal = 1,
  kUnknown = 2,
  kControl = 3,
  kUserDefined = 4,
  kUnused = 5,
  kByte = 6,
};

// Pre-tokenizer regexes, as the HF tokenizer.json of each family has them.
constexpr const char* kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

json byte_level(bool use_regex) {
  return {{"type", "ByteLevel"},
          {"add_prefix_space", false},
          {"trim_offsets", false},
          {"use_regex", use_regex}};
}

struct Vocab {
  std::vector<std::string> tokens;
  std::vector<int64_t> types;
  std::vector<double> scores;
};

Result<Vocab> read_vocab(const gguf::Header& h) {
  Vocab v;
  SS_ASSIGN_OR_RETURN(const gguf::Array* tokens, h.get_array("tokenizer.ggml.tokens"));
  if (tokens->elem_type != gguf::ValueType::kString || tokens->size() == 0) {
    return make_error("gguf: tokenizer.ggml.tokens is not a non-empty string array");
  }
  v.tokens = tokens->strings;
  const size_t n = v.tokens.size();
  v.types.assign(n, kNormal);
  if (h.has("tokenizer.ggml.token_type")) {
    SS_ASSIGN_OR_RETURN(const gguf::Array* types, h.get_array("tokenizer.ggml.token_type"));
    if (!gguf::is_integer(types->elem_type) || types->size() != n) {
      return errorf("gguf: tokenizer.ggml.token_type is not {} integers", n);
    }
    v.types = types->ints;
  }
  if (h.has("tokenizer.ggml.scores")) {
    SS_ASSIGN_OR_RETURN(const gguf::Array* scores, h.get_array("tokenizer.ggml.scores"));
    if (!gguf::is_float(scores->elem_type) || scores->size() != n) {
      return errorf("gguf: tokenizer.ggml.scores is not {} floats", n);
    }
    v.scores = scores->floats;
  }
  return v;
}

// Merges of a SentencePiece BPE vocab from its scores, in HF's order
// (SentencePieceExtractor.extract with vocab_scores): every split of a
// piece into two pieces of the vocab, sorted by the piece's score, highest
// first (stable), and within a piece by the ids of its left and right parts.
json spm_merges(const Vocab& v, const std::unordered_map<std::string, int64_t>& ids) {
  struct Merge {
    int64_t left, right;
    double score;
  };
  std::vector<Merge> merges;
  for (size_t id = 0; id < v.tokens.size(); ++id) {
    if (v.types[id] != kNormal && v.types[id] != kUserDefined) continue;
    const std::string& piece = v.tokens[id];
    std::vector<Merge> local;
    for (size_t cut = 1; cut < piece.size(); ++cut) {
      if ((static_cast<unsigned char>(piece[cut]) & 0xC0) == 0x80) continue;  // inside a character
      auto l = ids.find(piece.substr(0, cut));
      auto r = ids.find(piece.substr(cut));
      if (l != ids.end() && r != ids.end()) local.push_back({l->second, r->second, v.scores[id]});
    }
    std::sort(local.begin(), local.end(), [](const Merge& a, const Merge& b) {
      return a.left != b.left ? a.left < b.left : a.right < b.right;
    });
    merges.insert(merges.end(), local.begin(), local.end());
  }
  std::stable_sort(merges.begin(), merges.end(),
                   [](const Merge& a, const Merge& b) { return a.score > b.score; });
  json out = json::array();
  for (const Merge& m : merges) {
    out.push_back(json::array({v.tokens[size_t(m.left)], v.tokens[size_t(m.right)]}));
  }
  return out;
}

Result<std::optional<int64_t>> optional_id(const gguf::Header& h, const std::string& key,
                                           size_t n_tokens) {
  if (!h.has(key)) return std::optional<int64_t>();
  SS_ASSIGN_OR_RETURN(int64_t id, h.get_int(key));
  if (id < 0 || static_cast<size_t>(id) >= n_tokens) {
    // Some converters write -1 / out-of-range ids for "none".
    return std::optional<int64_t>();
  }
  return std::optional<int64_t>(id);
}

Result<bool> optional_bool(const gguf::Header& h, const std::string& key, bool fallback) {
  return h.has(key) ? h.get_bool(key) : Result<bool>(fallback);
}

// A TemplateProcessing that adds bos before / eos after the text.
json post_processor(const Vocab& v, std::optional<int64_t> bos, std::optional<int64_t> eos) {
  json single = json::array();
  json specials = json::object();
  auto special = [&](int64_t id) {
    const std::string& t = v.tokens[size_t(id)];
    specials[t] = {{"id", t}, {"ids", {id}}, {"tokens", {t}}};
    return json{{"SpecialToken", {{"id", t}, {"type_id", 0}}}};
  };
  if (bos) single.push_back(special(*bos));
  single.push_back({{"Sequence", {{"id", "A"}, {"type_id", 0}}}});
  if (eos) single.push_back(special(*eos));
  return {{"type", "TemplateProcessing"},
          {"single", single},
          {"pair", single},
          {"special_tokens", specials}};
}

}  // namespace

Result<TokenizerJsonTexts> tokenizer_json_from_gguf(const gguf::Header& h) {
  SS_ASSIGN_OR_RETURN(std::string model, h.get_string("tokenizer.ggml.model"));
  if (model != "gpt2" && model != "llama") {
    return errorf("gguf: tokenizer.ggml.model '{}' is not supported (supported: gpt2, llama)",
                  model);
  }
  const bool spm = model == "llama";
  std::string pre = "default";
  if (h.has("tokenizer.ggml.pre")) {
    SS_ASSIGN_OR_RETURN(pre, h.get_string("tokenizer.ggml.pre"));
  }
  SS_ASSIGN_OR_RETURN(Vocab v, read_vocab(h));
  const size_t n = v.tokens.size();
  if (spm && v.scores.empty())
    return make_error("gguf: a llama tokenizer needs tokenizer.ggml.scores");

  json tj;
  tj["version"] = "1.0";
  json added = json::array();
  json vocab = json::object();
  std::unordered_map<std::string, int64_t> ids;
  for (size_t id = 0; id < n; ++id) {
    const int64_t type = v.types[id];
    const bool is_added = type == kControl || type == kUserDefined || (!spm && type == kUnknown);
    if (is_added || (spm && type == kUnknown)) {
      added.push_back({{"id", id},
                       {"content", v.tokens[id]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", type != kUserDefined}});
    }
    // HF keeps gpt2-style added tokens out of the BPE vocab; SentencePiece
    // vocabularies hold every piece, specials included.
    if ((spm || !is_added) && !ids.count(v.tokens[id])) {
      ids.emplace(v.tokens[id], static_cast<int64_t>(id));
      vocab[v.tokens[id]] = id;
    }
  }
  tj["added_tokens"] = added;

  SS_ASSIGN_OR_RETURN(std::optional<int64_t> bos, optional_id(h, "tokenizer.ggml.bos_token_id", n));
  SS_ASSIGN_OR_RETURN(std::optional<int64_t> eos, optional_id(h, "tokenizer.ggml.eos_token_id", n));
  SS_ASSIGN_OR_RETURN(std::optional<int64_t> unk,
                      optional_id(h, "tokenizer.ggml.unknown_token_id", n));
  // llama.cpp's defaults: BOS for SentencePiece and Llama-3 vocabularies.
  const bool llama3 = pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3";
  SS_ASSIGN_OR_RETURN(bool add_bos,
                      optional_bool(h, "tokenizer.ggml.add_bos_token", spm || llama3));
  SS_ASSIGN_OR_RETURN(bool add_eos, optional_bool(h, "tokenizer.ggml.add_eos_token", false));

  json bpe = {{"type", "BPE"},
              {"dropout", nullptr},
              {"continuing_subword_prefix", nullptr},
              {"end_of_word_suffix", nullptr}};
  if (spm) {
    SS_ASSIGN_OR_RETURN(bool space_prefix,
                        optional_bool(h, "tokenizer.ggml.add_space_prefix", true));
    json normalizers = json::array();
    if (space_prefix) normalizers.push_back({{"type", "Prepend"}, {"prepend", "\u2581"}});
    normalizers.push_back(
        {{"type", "Replace"}, {"pattern", {{"String", " "}}}, {"content", "\u2581"}});
    tj["normalizer"] = {{"type", "Sequence"}, {"normalizers", normalizers}};
    tj["pre_tokenizer"] = nullptr;
    json decoders =
        json::array({{{"type", "Replace"}, {"pattern", {{"String", "\u2581"}}}, {"content", " "}},
                     {{"type", "ByteFallback"}},
                     {{"type", "Fuse"}}});
    if (space_prefix) {
      decoders.push_back({{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}});
    }
    tj["decoder"] = {{"type", "Sequence"}, {"decoders", decoders}};
    bpe["unk_token"] = unk ? json(v.tokens[size_t(*unk)]) : json(nullptr);
    bpe["fuse_unk"] = true;
    bpe["byte_fallback"] = true;
    bpe["merges"] = spm_merges(v, ids);
  } else {
    const char* regex = nullptr;
    if (llama3) regex = kLlama3Regex;
    if (pre == "qwen2") regex = kQwen2Regex;
    if (regex) {
      tj["pre_tokenizer"] = {{"type", "Sequence"},
                             {"pretokenizers", json::array({{{"type", "Split"},
                                                             {"pattern", {{"Regex", regex}}},
                                                             {"behavior", "Isolated"},
                                                             {"invert", false}},
                                                            byte_level(false)})}};
    } else if (pre == "default" || pre == "gpt-2") {
      tj["pre_tokenizer"] = byte_level(true);  // GPT-2's own regex
    } else {
      return errorf(
          "gguf: tokenizer.ggml.pre '{}' is not supported (supported: llama-bpe, "
          "llama3, qwen2, gpt-2, default)",
          pre);
    }
    // Qwen's tokenizer.json normalizes to NFC before splitting.
    tj["normalizer"] = pre == "qwen2" ? json{{"type", "NFC"}} : json(nullptr);
    tj["decoder"] = byte_level(false);
    SS_ASSIGN_OR_RETURN(const gguf::Array* merges, h.get_array("tokenizer.ggml.merges"));
    if (merges->elem_type != gguf::ValueType::kString) {
      return make_error("gguf: tokenizer.ggml.merges is not a string array");
    }
    bpe["unk_token"] = nullptr;
    bpe["fuse_unk"] = false;
    bpe["byte_fallback"] = false;
    bpe["ignore_merges"] = llama3;  // as llama.cpp and Llama-3's tokenizer.json do
    bpe["merges"] = merges->strings;
  }
  bpe["vocab"] = std::move(vocab);
  tj["model"] = std::move(bpe);
  tj["post_processor"] = add_bos || add_eos ? post_processor(v, add_bos ? bos : std::nullopt,
                                                             add_eos ? eos : std::nullopt)
                                            : json(nullptr);

  json config = json::object();
  if (bos) config["bos_token"] = v.tokens[size_t(*bos)];
  if (eos) config["eos_token"] = v.tokens[size_t(*eos)];
  config["add_bos_token"] = add_bos;
  if (h.has("tokenizer.chat_template")) {
    SS_ASSIGN_OR_RETURN(std::string chat_template, h.get_string("tokenizer.chat_template"));
    config["chat_template"] = chat_template;
  }
  // Invalid UTF-8 in a token string: dump() would throw; replace it instead.
  return TokenizerJsonTexts{tj.dump(-1, ' ', false, json::error_handler_t::replace),
                            config.dump(-1, ' ', false, json::error_handler_t::replace)};
}

}  // namespace specstack
