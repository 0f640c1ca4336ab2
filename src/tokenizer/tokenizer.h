// Tokenizer: HuggingFace tokenizer.json (byte-level BPE with regex
// pre-tokenization as in Llama 3 / Qwen, and SentencePiece-style BPE with byte
// fallback as in Mistral / TinyStories), added and special tokens,
// normalizers, post-processors (BOS) and decoders as the file configures them.
// tokenizer_config.json supplies bos/eos names, add_bos_token and the chat
// template.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/text_ranges.h"

namespace specstack {

struct TokenizerImpl;

struct EncodeOptions {
  // Apply the post-processor (e.g. prepend BOS) as HF does.
  bool add_special_tokens = false;
  // Byte ranges of the text (sorted, disjoint; base/text_ranges.h) that are
  // plain text: added tokens marked "special" are not matched inside them or
  // across their edges, so "<|im_start|>" there tokenizes as "<", "|", "im",
  // ... exactly as HF's split_special_tokens=True would; added tokens that
  // are not special (Qwen3's <think>) still match, as they do in HF. For a
  // chat prompt these are the bytes that came from the request.
  std::span<const TextRange> plain_text;
};

class Tokenizer {
 public:
  // Loads <model_dir>/tokenizer.json and, when present, tokenizer_config.json;
  // or, when model_dir names a GGUF file, the tokenizer in its metadata
  // (tokenizer/gguf_vocab.h).
  static Result<Tokenizer> load_dir(const std::string& model_dir);
  // True when load_dir has a tokenizer to read there: <dir>/tokenizer.json,
  // or a GGUF file (whose tokenizer metadata load_dir then requires).
  static bool available(const std::string& model_dir);
  // From the two files' texts; tokenizer_config_json may be empty.
  static Result<Tokenizer> from_json(std::string_view tokenizer_json,
                                     std::string_view tokenizer_config_json);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // add_special_tokens: apply the post-processor (e.g. prepend BOS) as HF does.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens) const;
  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options) const;
  // HF decode(ids, skip_special_tokens) semantics. Invalid UTF-8 pieces become U+FFFD.
  // Unknown ids are skipped. skip_special_tokens skips by id (HF 0.23 keeps
  // special tokens marked "normalized", e.g. TinyStories' <|start_story|>).
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens = false) const;
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  // The raw bytes token `id` adds to a text in the middle of it (no U+FFFD
  // for partial UTF-8; the decoder's start-of-text rules not applied); an
  // added token gives its content. "" for unknown ids.
  std::string token_bytes(int32_t id) const;
  int32_t vocab_size() const;  // including added tokens
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // raw vocab string ("" if out of range)
  bool is_special(int32_t id) const;
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;
  // The bos/eos token strings from tokenizer_config.json ("" if none).
  const std::string& bos_token() const;
  const std::string& eos_token() const;
  // tokenizer_config.json "chat_template" ("" if none).
  const std::string& chat_template() const;
  // tokenizer_config.json "add_bos_token" (nullopt if absent). Informational:
  // encode() follows tokenizer.json's post-processor, as HF does.
  std::optional<bool> add_bos_token() const;

 private:
  friend class StreamDecoder;  // reads the decoder's properties
  explicit Tokenizer(std::unique_ptr<TokenizerImpl> impl);
  std::unique_ptr<TokenizerImpl> impl_;
};

// Incremental detokenizer for streaming: push ids one at a time and get back
// only text that is final: never half a UTF-8 code point, and identical in sum
// to decode(all ids) once flush() is called. Each push decodes only a short
// window of recent ids (prefix_offset / read_offset technique), so its cost
// does not grow with the length of the stream. The tokenizer must outlive it.
//
// With a ByteFallback decoder, the text of a run of <0xXX> tokens is held
// until the run ends: HF decodes the run as a whole (one U+FFFD per byte when
// it is not valid UTF-8), so a later byte can still change earlier text.
class StreamDecoder {
 public:
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = false);
  std::string push(int32_t id);
  // Returns the text still held back and ends the stream (the decoder then
  // starts a new one).
  std::string flush();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> ids_;  // the window: ids from the prefix offset on
  std::string prefix_text_;   // decode(ids_[0, read_offset_)), already returned
  size_t read_offset_ = 0;    // ids_[read_offset_, ...) are not returned yet
};

}  // namespace specstack
