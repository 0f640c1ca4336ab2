#include "tokenizer/tokenizer.h"

#include <fstream>
#include <optional>
#include <sstream>

#include "base/check.h"
#include "gguf/gguf_file.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace specstack {

namespace {

using tok::Json;

Result<std::string> read_file(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  if (!file) return errorf("cannot open {}", path);
  std::ostringstream text;
  text << file.rdbuf();
  if (file.bad()) return errorf("cannot read {}", path);
  return text.str();
}

Result<tok::BpeModel> parse_model(const Json& root) {
  SS_ASSIGN_OR_RETURN(const Json* model, tok::require_field(root, "model", ""));
  if (!model->is_object()) return make_error("model: expected an object");
  SS_ASSIGN_OR_RETURN(auto type, tok::optional_string(*model, "type", "model"));
  // Files written by old versions of tokenizers omit the BPE model's type.
  if (type.value_or("BPE") != "BPE") {
    return errorf("model.type: \"{}\" is not supported (only BPE models are)", *type);
  }
  return tok::BpeModel::parse(*model, "model");
}

Result<std::unique_ptr<TokenizerImpl>> parse_tokenizer_json(std::string_view text) {
  Json root;
  try {
    root = Json::parse(text);
  } catch (const Json::parse_error& e) {
    return errorf("not valid JSON ({})", e.what());
  }
  if (!root.is_object()) return make_error("expected a JSON object at the top level");
  SS_ASSIGN_OR_RETURN(tok::BpeModel model, parse_model(root));

  static const Json kNull;
  auto section = [&](const char* key) -> const Json& {
    const Json* value = tok::find_field(root, key);
    return value != nullptr ? *value : kNull;
  };
  SS_ASSIGN_OR_RETURN(auto normalizer, tok::parse_normalizer(section("normalizer"), "normalizer"));
  // Added tokens marked "normalized" are matched in their normalized form.
  SS_ASSIGN_OR_RETURN(auto added, tok::AddedVocabulary::parse(section("added_tokens"),
                                                              "added_tokens", normalizer.get()));
  auto impl = std::make_unique<TokenizerImpl>(std::move(model), std::move(added));
  impl->normalizer = std::move(normalizer);
  SS_ASSIGN_OR_RETURN(impl->pre_tokenizer,
                      tok::parse_pre_tokenizer(section("pre_tokenizer"), "pre_tokenizer"));
  SS_ASSIGN_OR_RETURN(impl->post_processor,
                      tok::parse_post_processor(section("post_processor"), "post_processor"));
  SS_ASSIGN_OR_RETURN(impl->decoder, tok::parse_decoder(section("decoder"), "decoder"));
  impl->vocab_size = std::max(impl->model.id_limit(), impl->added.id_limit());
  if (impl->post_processor) {
    // Ids outside the vocabulary would index past the model's embeddings.
    std::vector<int32_t> ids;
    impl->post_processor->added_ids(ids);
    for (const int32_t id : ids) {
      if (impl->token_for_decode(id, false) == nullptr) {
        return errorf("post_processor: token id {} is not in the vocabulary", id);
      }
    }
  }
  return impl;
}

// HF takes a Rust &str, so invalid UTF-8 is replaced (U+FFFD) first. Each
// plain range is converted on its own so that the ranges follow the text.
void make_valid_utf8(std::string_view text, std::span<const TextRange> plain, std::string& valid,
                     TextRanges& valid_plain) {
  size_t done = 0;
  for (const TextRange& r : plain) {
    valid += tok::utf8_lossy(text.substr(done, r.begin - done));
    const size_t begin = valid.size();
    valid += tok::utf8_lossy(text.substr(r.begin, r.end - r.begin));
    append_range(valid_plain, begin, valid.size());
    done = r.end;
  }
  valid += tok::utf8_lossy(text.substr(done));
}

// Where the plain ranges of `raw` lie in `normalized` (= normalize(raw)). The
// normalizers rewrite locally (Prepend at the start, Replace, NFC), so at a
// range edge b, normalize(raw[0, b)) is a prefix of the whole normalization
// and its length is where b went -- unless a rewrite spans the edge (NFC
// composing across it, a multi-byte Replace pattern); then the whole piece is
// plain for the normalized special tokens, the safe side.
TextRanges normalized_plain(const tok::Normalizer& normalizer, std::string_view raw,
                            std::span<const TextRange> plain, const std::string& normalized) {
  auto map_edge = [&](size_t b) -> std::optional<size_t> {
    if (b == 0) return size_t{0};
    if (b == raw.size()) return normalized.size();
    std::string prefix(raw.substr(0, b));
    normalizer.normalize(prefix);
    if (!normalized.starts_with(prefix)) return std::nullopt;
    return prefix.size();
  };
  TextRanges out;
  for (const TextRange& r : plain) {
    const auto begin = map_edge(r.begin);
    const auto end = map_edge(r.end);
    if (!begin || !end) {
      TextRanges all;
      append_range(all, 0, normalized.size());
      return all;
    }
    append_range(out, *begin, *end);
  }
  return out;
}

}  // namespace

Result<Tokenizer> Tokenizer::from_json(std::string_view tokenizer_json,
                                       std::string_view tokenizer_config_json) {
  std::unique_ptr<TokenizerImpl> impl;
  try {
    auto parsed = parse_tokenizer_json(tokenizer_json);
    if (!parsed.ok()) return errorf("tokenizer.json: {}", parsed.message());
    impl = std::move(parsed).value();
    auto config = parse_tokenizer_config(tokenizer_config_json);
    if (!config.ok()) return errorf("tokenizer_config.json: {}", config.message());
    impl->config = std::move(config).value();
  } catch (const std::exception& e) {
    // A field shape no check above anticipated; still the file's fault.
    return errorf("tokenizer.json: malformed ({})", e.what());
  }
  return Tokenizer(std::move(impl));
}

bool Tokenizer::available(const std::string& model_dir) {
  return gguf::is_gguf_file(model_dir) || std::ifstream(model_dir + "/tokenizer.json").good();
}

Result<Tokenizer> Tokenizer::load_dir(const std::string& model_dir) {
  if (gguf::is_gguf_file(model_dir)) {
    SS_ASSIGN_OR_RETURN(gguf::GgufFile file, gguf::GgufFile::open(model_dir));
    auto texts = tokenizer_json_from_gguf(file.header());
    if (!texts.ok()) return errorf("{}: {}", model_dir, texts.message());
    auto tokenizer = from_json(texts->tokenizer_json, texts->tokenizer_config_json);
    if (!tokenizer.ok()) return errorf("{}: {}", model_dir, tokenizer.message());
    return tokenizer;
  }
  SS_ASSIGN_OR_RETURN(std::string tokenizer_json, read_file(model_dir + "/tokenizer.json"));
  std::string config_json;
  const std::string config_path = model_dir + "/tokenizer_config.json";
  if (std::ifstream(config_path).good()) {
    SS_ASSIGN_OR_RETURN(config_json, read_file(config_path));
  }
  auto tokenizer = from_json(tokenizer_json, config_json);
  if (!tokenizer.ok()) return errorf("{}: {}", model_dir, tokenizer.message());
  return tokenizer;
}

Tokenizer::Tokenizer(std::unique_ptr<TokenizerImpl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  EncodeOptions options;
  options.add_special_tokens = add_special_tokens;
  return encode(text, options);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, const EncodeOptions& options) const {
  SS_CHECK_MSG(ranges_valid(options.plain_text, text.size()),
               "EncodeOptions::plain_text must be sorted, disjoint ranges inside the text");
  // Everything downstream relies on valid UTF-8 (HF takes a Rust &str).
  std::span<const TextRange> plain = options.plain_text;
  std::string valid;
  TextRanges valid_plain;
  if (!tok::is_valid_utf8(text)) {
    make_valid_utf8(text, plain, valid, valid_plain);
    text = valid;
    plain = valid_plain;
  }
  const TokenizerImpl& t = *impl_;
  std::vector<int32_t> ids;
  std::vector<tok::Segment> pieces;
  std::vector<tok::PreToken> words;
  for (tok::Segment& raw : t.added.split_raw(text, plain)) {
    if (raw.token_id >= 0) {
      ids.push_back(raw.token_id);
      continue;
    }
    if (t.normalizer) {
      // Plain ranges only matter to normalized added tokens (Qwen3 has none).
      if (raw.plain.empty() || !t.added.has_normalized_tokens()) {
        t.normalizer->normalize(raw.text);
      } else {
        const std::string before = raw.text;
        t.normalizer->normalize(raw.text);
        raw.plain = normalized_plain(*t.normalizer, before, raw.plain, raw.text);
      }
    }
    pieces.clear();
    t.added.split_normalized(std::move(raw), pieces);
    for (tok::Segment& piece : pieces) {
      if (piece.token_id >= 0) {
        ids.push_back(piece.token_id);
        continue;
      }
      words.clear();
      words.push_back({std::move(piece.text), piece.at_start});
      if (t.pre_tokenizer) t.pre_tokenizer->pre_tokenize(words);
      for (const tok::PreToken& word : words) t.model.encode_word(word.text, ids);
    }
  }
  if (options.add_special_tokens && t.post_processor) t.post_processor->process(ids);
  return ids;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  return decode(std::span<const int32_t>(ids), skip_special_tokens);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  const TokenizerImpl& t = *impl_;
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (const int32_t id : ids) {
    // Unknown ids are skipped, as HF does.
    if (const std::string* token = t.token_for_decode(id, skip_special_tokens)) {
      tokens.push_back(*token);
    }
  }
  if (t.decoder) t.decoder->decode_chain(tokens);
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (i > 0 && !t.decoder) text += ' ';
    text += tokens[i];
  }
  return text;
}

std::string Tokenizer::token_bytes(int32_t id) const {
  const TokenizerImpl& t = *impl_;
  if (const tok::AddedToken* added = t.added.find_by_id(id)) return added->decode_form;
  const std::string* token = t.model.id_to_token(id);
  if (token == nullptr) return std::string();
  std::string bytes = *token;
  if (t.decoder) t.decoder->token_bytes(bytes);
  return bytes;
}

int32_t Tokenizer::vocab_size() const {
  return impl_->vocab_size;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  if (auto id = impl_->added.token_to_id(token)) return id;
  return impl_->model.token_to_id(token);
}

std::string Tokenizer::id_to_token(int32_t id) const {
  if (const tok::AddedToken* added = impl_->added.find_by_id(id)) return added->content;
  if (const std::string* token = impl_->model.id_to_token(id)) return *token;
  return std::string();
}

bool Tokenizer::is_special(int32_t id) const {
  const tok::AddedToken* added = impl_->added.find_by_id(id);
  return added != nullptr && added->special;
}

std::optional<int32_t> Tokenizer::bos_id() const {
  if (impl_->config.bos_token.empty()) return std::nullopt;
  return token_to_id(impl_->config.bos_token);
}

std::optional<int32_t> Tokenizer::eos_id() const {
  if (impl_->config.eos_token.empty()) return std::nullopt;
  return token_to_id(impl_->config.eos_token);
}

const std::string& Tokenizer::bos_token() const {
  return impl_->config.bos_token;
}
const std::string& Tokenizer::eos_token() const {
  return impl_->config.eos_token;
}
const std::string& Tokenizer::chat_template() const {
  return impl_->config.chat_template;
}
std::optional<bool> Tokenizer::add_bos_token() const {
  return impl_->config.add_bos_token;
}

}  // namespace specstack
