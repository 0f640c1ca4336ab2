// Whether two tokenizers map ids to the same tokens. A draft model that
// scores (or proposes) token ids for a target must read every id as the
// target does; otherwise its choices refer to different text.
#pragma once

#include "base/status.h"
#include "tokenizer/tokenizer.h"

namespace specstack {

// Ok when a and b have the same vocab_size, the same id_to_token for every id
// and the same bos/eos ids. The error names the first differing id (or the
// differing size / special id), a's value first, tokens quoted and escaped:
// id 1 differs: "<|start_story|>" vs "<s>" (vocab_size 2048 vs 32000)
Status check_same_vocabulary(const Tokenizer& a, const Tokenizer& b);

}  // namespace specstack
