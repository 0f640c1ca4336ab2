#include "server/specprefill_selection.h"

#include <algorithm>
#include <string>
#include <vector>

namespace specstack {

OrderedJson specprefill_selection_json(const SpecPrefillStats& stats,
                                       std::span<const int32_t> prompt,
                                       const Tokenizer& tokenizer) {
  if (!stats.applied || stats.selection == nullptr) return OrderedJson(nullptr);
  const SpecPrefillSelection& selection = *stats.selection;
  const auto m = static_cast<int64_t>(prompt.size());
  const auto n_chunks = static_cast<int64_t>(selection.chunk_scores.size());
  std::vector<bool> kept(static_cast<size_t>(n_chunks), false);
  for (int32_t c : selection.kept_chunks) {
    if (c >= 0 && c < n_chunks) kept[static_cast<size_t>(c)] = true;
  }
  OrderedJson chunks = OrderedJson::array();
  OrderedJson importance = OrderedJson::array();
  OrderedJson kept_json = OrderedJson::array();
  int64_t kept_tokens = 0;
  for (int64_t c = 0; c < n_chunks; ++c) {
    const int64_t start = selection.first_position + c * selection.chunk;
    const int64_t end = std::min(start + selection.chunk, m);
    chunks.push_back(OrderedJson::array({start, end}));
    importance.push_back(selection.chunk_scores[static_cast<size_t>(c)]);
    kept_json.push_back(static_cast<bool>(kept[static_cast<size_t>(c)]));
    if (kept[static_cast<size_t>(c)]) kept_tokens += end - start;
  }
  // Streaming detokenization cuts the text at token boundaries without ever
  // splitting a character, and its pieces add up to decode(prompt).
  StreamDecoder decoder(tokenizer, /*skip_special_tokens=*/false);
  OrderedJson texts = OrderedJson::array();
  for (size_t i = 0; i < prompt.size(); ++i) {
    std::string text = decoder.push(prompt[i]);
    if (i + 1 == prompt.size()) text += decoder.flush();
    texts.push_back(std::move(text));
  }
  const int64_t scored = m - selection.first_position;
  OrderedJson out = OrderedJson::object();
  out["chunk_size"] = selection.chunk;
  out["prefix_tokens"] = selection.first_position;
  out["chunks"] = std::move(chunks);
  out["importance"] = std::move(importance);
  out["kept"] = std::move(kept_json);
  out["kept_chunks"] = static_cast<int64_t>(selection.kept_chunks.size());
  out["kept_fraction"] =
      scored > 0 ? static_cast<double>(kept_tokens) / static_cast<double>(scored) : 0.0;
  out["token_texts"] = std::move(texts);
  return out;
}

}  // namespace specstack
