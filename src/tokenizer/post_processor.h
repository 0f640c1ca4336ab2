// tokenizer.json "post_processor", applied when encode(add_special_tokens =
// true): TemplateProcessing (e.g. "<s>" + $A), BertProcessing,
// RobertaProcessing, ByteLevel (offsets only, so no change to ids), Sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "tokenizer/json_fields.h"

namespace specstack::tok {

class PostProcessor {
 public:
  virtual ~PostProcessor() = default;
  // Single-sequence processing of the encoded ids.
  virtual void process(std::vector<int32_t>& ids) const = 0;
  // Appends every id the processor may add (to check them against the vocab).
  virtual void added_ids(std::vector<int32_t>& out) const = 0;
};

// A null json gives a nullptr post-processor (ids unchanged).
Result<std::unique_ptr<PostProcessor>> parse_post_processor(const Json& json,
                                                            const std::string& path, int depth = 0);

}  // namespace specstack::tok
