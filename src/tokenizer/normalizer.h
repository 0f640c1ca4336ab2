// tokenizer.json "normalizer": Sequence, Prepend, Replace, NFC (or null).
// Normalizers rewrite a piece of text before pre-tokenization; HF runs them
// on each piece left between added tokens, so Prepend applies per piece.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"
#include "tokenizer/json_fields.h"

namespace specstack::tok {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void normalize(std::string& text) const = 0;  // text is valid UTF-8
};

// A null json gives a nullptr normalizer (no normalization).
Result<std::unique_ptr<Normalizer>> parse_normalizer(const Json& json, const std::string& path,
                                                     int depth = 0);

}  // namespace specstack::tok
