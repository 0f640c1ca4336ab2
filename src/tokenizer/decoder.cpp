#include "tokenizer/decoder.h"

#include "tokenizer/byte_level.h"
#include "tokenizer/replace.h"
#include "tokenizer/utf8.h"

namespace specstack::tok {

namespace {

class SequenceDecoder final : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> parts)
      : parts_(std::move(parts)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (const auto& part : parts_) part->decode_chain(tokens);
  }
  void token_bytes(std::string& token) const override {
    for (const auto& part : parts_) part->token_bytes(token);
  }
  bool joins_byte_tokens() const override {
    for (const auto& part : parts_) {
      if (part->joins_byte_tokens()) return true;
    }
    return false;
  }

 private:
  std::vector<std::unique_ptr<Decoder>> parts_;
};

// Maps each token's stand-in characters back to bytes; a token holding any
// other character contributes its UTF-8 as is (e.g. added tokens). The bytes
// of all tokens are then read as one UTF-8 string, invalid parts as U+FFFD.
class ByteLevelDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& token : tokens) {
      const size_t mark = bytes.size();
      bool all_mapped = true;
      for (size_t i = 0; i < token.size() && all_mapped;) {
        const int b = map_.byte_of(next_code_point(token, i));
        if (b < 0) {
          all_mapped = false;
        } else {
          bytes += static_cast<char>(b);
        }
      }
      if (!all_mapped) bytes.replace(mark, std::string::npos, token);
    }
    tokens.assign(1, utf8_lossy(bytes));
  }
  void token_bytes(std::string& token) const override {
    std::string bytes;
    for (size_t i = 0; i < token.size();) {
      const int b = map_.byte_of(next_code_point(token, i));
      if (b < 0) return;  // not a byte-level token (an added one): its text as is
      bytes += static_cast<char>(b);
    }
    token = std::move(bytes);
  }

 private:
  ByteLevelMap map_;
};

class ReplaceDecoder final : public Decoder {
 public:
  explicit ReplaceDecoder(Replacer replacer) : replacer_(std::move(replacer)) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) token = replacer_.apply(token);
  }

 private:
  Replacer replacer_;
};

// Runs of <0xXX> tokens become the UTF-8 text of their bytes, or one U+FFFD
// per byte when the run is not valid UTF-8 (HF's rule, not from_utf8_lossy).
class ByteFallbackDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens.size());
    std::string run;
    size_t run_tokens = 0;
    auto flush = [&] {
      if (run_tokens == 0) return;
      if (is_valid_utf8(run)) {
        out.push_back(run);
      } else {
        for (size_t i = 0; i < run_tokens; ++i) out.emplace_back(kReplacementChar);
      }
      run.clear();
      run_tokens = 0;
    };
    for (std::string& token : tokens) {
      if (const int b = byte_token_value(token); b >= 0) {
        run += static_cast<char>(b);
        ++run_tokens;
      } else {
        flush();
        out.push_back(std::move(token));
      }
    }
    flush();
    tokens = std::move(out);
  }

  bool joins_byte_tokens() const override { return true; }
  void token_bytes(std::string& token) const override {
    if (const int b = byte_token_value(token); b >= 0) token.assign(1, static_cast<char>(b));
  }
};

class FuseDecoder final : public Decoder {
 public:
  void decode_chain(std::vector<std::string>& tokens) const override {
    std::string fused;
    for (const std::string& token : tokens) fused += token;
    tokens.assign(1, std::move(fused));
  }
};

// Strips up to `start` leading and `stop` trailing `content` characters of
// each token (SentencePiece: the space before the first word).
class StripDecoder final : public Decoder {
 public:
  StripDecoder(std::string content, size_t start, size_t stop)
      : content_(std::move(content)), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (std::string& token : tokens) {
      size_t begin = 0;
      for (size_t n = 0; n < start_ && begin < token.size() &&
                         token.compare(begin, content_.size(), content_) == 0;
           ++n) {
        begin += content_.size();
      }
      size_t end = token.size();
      for (size_t n = 0; n < stop_ && end >= begin + content_.size() &&
                         token.compare(end - content_.size(), content_.size(), content_) == 0;
           ++n) {
        end -= content_.size();
      }
      token = token.substr(begin, end - begin);
    }
  }
  void token_bytes(std::string&) const override {}  // strips only at the text's edges

 private:
  std::string content_;  // one character
  size_t start_;
  size_t stop_;
};

// Replacement characters become spaces, except in the first token when a
// prefix was prepended at encode time (it is dropped there).
class MetaspaceDecoder final : public Decoder {
 public:
  MetaspaceDecoder(std::string replacement, bool drop_in_first)
      : replacement_(std::move(replacement)), drop_in_first_(drop_in_first) {}
  void token_bytes(std::string& token) const override {
    std::string out;
    for (size_t pos = 0; pos < token.size();) {
      if (token.compare(pos, replacement_.size(), replacement_) == 0) {
        out += ' ';
        pos += replacement_.size();
      } else {
        out += token[pos++];
      }
    }
    token = std::move(out);
  }
  void decode_chain(std::vector<std::string>& tokens) const override {
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::string out;
      const std::string& token = tokens[i];
      for (size_t pos = 0; pos < token.size();) {
        if (token.compare(pos, replacement_.size(), replacement_) == 0) {
          if (i != 0 || !drop_in_first_) out += ' ';
          pos += replacement_.size();
        } else {
          out += token[pos++];
        }
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string replacement_;
  bool drop_in_first_;
};

Result<std::string> single_char(const Json& json, std::string_view key, const std::string& path) {
  SS_ASSIGN_OR_RETURN(std::string value, require_string(json, key, path));
  size_t end = 0;
  if (value.empty() || (next_code_point(value, end), end != value.size())) {
    return errorf("{}: expected one character", field_path(path, key));
  }
  return value;
}

Result<std::unique_ptr<Decoder>> parse_strip(const Json& json, const std::string& path) {
  SS_ASSIGN_OR_RETURN(std::string content, single_char(json, "content", path));
  SS_ASSIGN_OR_RETURN(int64_t start, optional_int(json, "start", 0, path));
  SS_ASSIGN_OR_RETURN(int64_t stop, optional_int(json, "stop", 0, path));
  if (start < 0 || stop < 0) return errorf("{}: start and stop must be >= 0", path);
  return std::unique_ptr<Decoder>(std::make_unique<StripDecoder>(
      std::move(content), static_cast<size_t>(start), static_cast<size_t>(stop)));
}

Result<std::unique_ptr<Decoder>> parse_metaspace(const Json& json, const std::string& path) {
  SS_ASSIGN_OR_RETURN(std::string replacement, single_char(json, "replacement", path));
  SS_ASSIGN_OR_RETURN(auto scheme, optional_string(json, "prepend_scheme", path));
  bool drop_in_first;
  if (scheme) {
    drop_in_first = *scheme != "never";
  } else {
    SS_ASSIGN_OR_RETURN(drop_in_first, optional_bool(json, "add_prefix_space", true, path));
  }
  return std::unique_ptr<Decoder>(
      std::make_unique<MetaspaceDecoder>(std::move(replacement), drop_in_first));
}

}  // namespace

int byte_token_value(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return -1;
  int value = 0;
  for (size_t i = 3; i < 5; ++i) {
    const char c = token[i];
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

Result<std::unique_ptr<Decoder>> parse_decoder(const Json& json, const std::string& path,
                                               int depth) {
  if (json.is_null()) return std::unique_ptr<Decoder>();
  if (depth > kMaxComponentDepth) return errorf("{}: nested too deeply", path);
  SS_ASSIGN_OR_RETURN(std::string type, require_string(json, "type", path));
  if (type == "Sequence") {
    SS_ASSIGN_OR_RETURN(const Json* list, require_array(json, "decoders", path));
    std::vector<std::unique_ptr<Decoder>> parts;
    for (size_t i = 0; i < list->size(); ++i) {
      const std::string item_path = index_path(field_path(path, "decoders"), i);
      SS_ASSIGN_OR_RETURN(auto part, parse_decoder((*list)[i], item_path, depth + 1));
      if (part) parts.push_back(std::move(part));
    }
    return std::unique_ptr<Decoder>(std::make_unique<SequenceDecoder>(std::move(parts)));
  }
  if (type == "ByteLevel") return std::unique_ptr<Decoder>(std::make_unique<ByteLevelDecoder>());
  if (type == "ByteFallback") {
    return std::unique_ptr<Decoder>(std::make_unique<ByteFallbackDecoder>());
  }
  if (type == "Fuse") return std::unique_ptr<Decoder>(std::make_unique<FuseDecoder>());
  if (type == "Strip") return parse_strip(json, path);
  if (type == "Metaspace") return parse_metaspace(json, path);
  if (type == "Replace") {
    SS_ASSIGN_OR_RETURN(Replacer replacer, Replacer::parse(json, path));
    return std::unique_ptr<Decoder>(std::make_unique<ReplaceDecoder>(std::move(replacer)));
  }
  return errorf(
      "{}: unsupported decoder type \"{}\" (supported: Sequence, ByteLevel, ByteFallback, Fuse, "
      "Strip, Replace, Metaspace)",
      path, type);
}

}  // namespace specstack::tok
