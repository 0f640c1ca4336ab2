// tokenizer.json "pre_tokenizer": Sequence, Split, ByteLevel, Metaspace (or
// null). A pre-tokenizer cuts each normalized piece into the words the model
// encodes separately (and ByteLevel also maps bytes to its stand-in chars).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "tokenizer/json_fields.h"

namespace specstack::tok {

struct PreToken {
  std::string text;
  // The piece starts at offset 0 of the original text (Metaspace's
  // prepend_scheme "first" looks at this).
  bool at_start = false;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces pieces by their sub-pieces; empty pieces are dropped (as HF does).
  virtual void pre_tokenize(std::vector<PreToken>& pieces) const = 0;
};

// A null json gives a nullptr pre-tokenizer (the whole piece is one word).
Result<std::unique_ptr<PreTokenizer>> parse_pre_tokenizer(const Json& json, const std::string& path,
                                                          int depth = 0);

}  // namespace specstack::tok
