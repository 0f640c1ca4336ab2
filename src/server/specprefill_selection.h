// usage.specprefill.selection: which chunks of the prompt speculative prefill
// kept, in a form a page can draw without the tokenizer (the web UI's
// SpecPrefill view). Asked for per request with
// `"specprefill_return_selection": true`.
#pragma once

#include <cstdint>
#include <span>

#include "engine/engine_api.h"
#include "server/request_fields.h"
#include "tokenizer/tokenizer.h"

namespace specstack {

// {chunk_size, prefix_tokens, chunks: [[start, end), ...], importance: [...],
//  kept: [bool, ...], kept_chunks, kept_fraction, token_texts: [...]}, or null
// when speculative prefill did not apply (usage.specprefill.fallback_reason
// says why, if it was tried).
//
// Ranges are prompt token indices; chunks cover [prefix_tokens, M), the part
// that was scored (a cached prefix is always prefilled). token_texts holds
// every prompt token's text, special tokens included, cut where a streaming
// detokenizer cuts it (a multi-byte character split over tokens belongs to
// the token that completes it), so their concatenation is the whole prompt
// and token i's text is what chunk ranges index. kept_fraction is kept
// tokens over scored tokens, i.e. usage.specprefill.kept_tokens / prompt_tokens.
OrderedJson specprefill_selection_json(const SpecPrefillStats& stats,
                                       std::span<const int32_t> prompt, const Tokenizer& tokenizer);

}  // namespace specstack
