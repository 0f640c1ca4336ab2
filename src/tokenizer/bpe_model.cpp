#include "tokenizer/bpe_model.h"

#include <queue>

#include "tokenizer/utf8.h"

namespace specstack::tok {

Result<BpeModel> BpeModel::parse(const Json& json, const std::string& path) {
  BpeModel model;
  SS_ASSIGN_OR_RETURN(const Json* vocab, require_field(json, "vocab", path));
  if (!vocab->is_object()) return errorf("{}: expected an object", field_path(path, "vocab"));
  model.vocab_.reserve(vocab->size());
  int32_t max_id = -1;
  for (const auto& [token, value] : vocab->items()) {
    SS_ASSIGN_OR_RETURN(int32_t id,
                        as_token_id(value, field_path(path, "vocab") + "[\"" + token + "\"]"));
    model.vocab_[token] = id;
    max_id = std::max(max_id, id);
  }
  model.id_to_token_.resize(static_cast<size_t>(max_id + 1));
  model.has_token_.resize(model.id_to_token_.size());
  for (const auto& [token, id] : model.vocab_) {
    // Two tokens with one id: keep the first in byte order, deterministically.
    if (model.has_token_[id] && model.id_to_token_[id] < token) continue;
    model.id_to_token_[id] = token;
    model.has_token_[id] = true;
  }

  SS_ASSIGN_OR_RETURN(model.byte_fallback_, optional_bool(json, "byte_fallback", false, path));
  SS_ASSIGN_OR_RETURN(model.fuse_unk_, optional_bool(json, "fuse_unk", false, path));
  SS_ASSIGN_OR_RETURN(model.ignore_merges_, optional_bool(json, "ignore_merges", false, path));
  SS_ASSIGN_OR_RETURN(auto prefix, optional_string(json, "continuing_subword_prefix", path));
  SS_ASSIGN_OR_RETURN(auto suffix, optional_string(json, "end_of_word_suffix", path));
  model.continuing_subword_prefix_ = prefix.value_or("");
  model.end_of_word_suffix_ = suffix.value_or("");
  // "dropout" only matters for training-time subword regularisation; inference
  // encodes deterministically.
  SS_ASSIGN_OR_RETURN(auto unk, optional_string(json, "unk_token", path));
  if (unk) {
    // HF fails at encode time when unk_token is missing from the vocab; we
    // cannot fail encode, so such a file simply drops unknown characters.
    model.unk_id_ = model.token_to_id(*unk);
  }
  for (int b = 0; b < 256; ++b) {
    model.byte_fallback_ids_[b] = model.token_to_id(fmt::format("<0x{:02X}>", b)).value_or(-1);
  }

  SS_ASSIGN_OR_RETURN(const Json* merges, require_array(json, "merges", path));
  SS_TRY(model.parse_merges(*merges, field_path(path, "merges")));
  return model;
}

Status BpeModel::parse_merges(const Json& merges, const std::string& path) {
  merges_.reserve(merges.size());
  std::string merged;
  int32_t rank = 0;
  for (size_t i = 0; i < merges.size(); ++i) {
    const Json& merge = merges[i];
    std::string_view left, right;
    if (merge.is_string()) {  // "left right"
      const std::string& text = merge.get_ref<const std::string&>();
      if (text.starts_with("#version")) continue;  // a merges.txt header line
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos) {
        return errorf("{}: \"{}\" is not two tokens separated by one space", index_path(path, i),
                      text);
      }
      left = std::string_view(text).substr(0, space);
      right = std::string_view(text).substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {  // ["left", "right"]
      left = merge[0].get_ref<const std::string&>();
      right = merge[1].get_ref<const std::string&>();
    } else {
      return errorf("{}: expected \"left right\" or [\"left\", \"right\"]", index_path(path, i));
    }
    const auto left_id = token_to_id(left);
    const auto right_id = token_to_id(right);
    if (!left_id || !right_id) {
      return errorf("{}: token \"{}\" is not in the vocab", index_path(path, i),
                    left_id ? right : left);
    }
    // The right part loses its continuing-subword prefix when merged.
    const std::string_view& prefix = continuing_subword_prefix_;
    std::string_view right_rest = right;
    if (!prefix.empty() && right_rest.substr(0, prefix.size()) == prefix) {
      right_rest.remove_prefix(prefix.size());
    }
    merged.assign(left);
    merged.append(right_rest);
    const auto merged_id = token_to_id(merged);
    if (!merged_id) {
      return errorf("{}: merged token \"{}\" is not in the vocab", index_path(path, i), merged);
    }
    // HF collects the merges into a map, so a repeated pair keeps its last rank.
    merges_.insert_or_assign(pair_key(*left_id, *right_id), MergeTarget{rank++, *merged_id});
  }
  return Status();
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= id_limit() || !has_token_[id]) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const {
  auto add = [&](int32_t id) {
    const auto index = static_cast<int32_t>(symbols.size());
    if (!symbols.empty()) symbols.back().next = index;
    symbols.push_back({id, index - 1, -1, false});
  };
  // A pending <unk> id (-1: none), held so that fuse_unk can extend it.
  int32_t pending_unk = -1;
  std::string decorated;
  for (size_t i = 0; i < word.size();) {
    const size_t start = i;
    i = std::min(word.size(), i + utf8_sequence_length(static_cast<unsigned char>(word[i])));
    std::string_view piece = word.substr(start, i - start);
    const bool first = start == 0, last = i == word.size();
    if ((!first && !continuing_subword_prefix_.empty()) || (last && !end_of_word_suffix_.empty())) {
      decorated.assign(first ? "" : continuing_subword_prefix_);
      decorated.append(piece);
      if (last) decorated.append(end_of_word_suffix_);
      piece = decorated;
    }
    if (auto id = token_to_id(piece)) {
      if (pending_unk >= 0) {
        add(pending_unk);
        pending_unk = -1;
      }
      add(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all_bytes = true;
      for (const char c : piece)
        all_bytes &= byte_fallback_ids_[static_cast<unsigned char>(c)] >= 0;
      if (all_bytes) {
        // Like HF, a pending <unk> is not flushed here: it lands after these.
        for (const char c : piece) add(byte_fallback_ids_[static_cast<unsigned char>(c)]);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = *unk_id_;
    }
  }
  if (pending_unk >= 0) add(pending_unk);
}

void BpeModel::merge_symbols(std::vector<Symbol>& symbols) const {
  struct Candidate {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    // std::priority_queue pops the largest: make that the lowest rank, then
    // the leftmost position (HF's order).
    bool operator<(const Candidate& other) const {
      return rank != other.rank ? rank > other.rank : pos > other.pos;
    }
  };
  auto lookup = [&](int32_t a, int32_t b) -> const MergeTarget* {
    auto it = merges_.find(pair_key(a, b));
    return it == merges_.end() ? nullptr : &it->second;
  };
  std::priority_queue<Candidate> queue;
  for (size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const MergeTarget* m = lookup(symbols[i].id, symbols[i + 1].id)) {
      queue.push({m->rank, static_cast<int32_t>(i), m->new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.removed || left.next < 0) continue;
    Symbol& right = symbols[left.next];
    // Skip entries made stale by earlier merges around this position.
    const MergeTarget* current = lookup(left.id, right.id);
    if (current == nullptr || current->new_id != top.new_id) continue;
    left.id = top.new_id;
    right.removed = true;
    left.next = right.next;
    if (left.next >= 0) symbols[left.next].prev = top.pos;
    if (left.prev >= 0) {
      if (const MergeTarget* m = lookup(symbols[left.prev].id, left.id)) {
        queue.push({m->rank, left.prev, m->new_id});
      }
    }
    if (left.next >= 0) {
      if (const MergeTarget* m = lookup(left.id, symbols[left.next].id)) {
        queue.push({m->rank, top.pos, m->new_id});
      }
    }
  }
}

void BpeModel::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {  // Llama 3: a word that is itself a token is emitted whole
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  initial_symbols(word, symbols);
  merge_symbols(symbols);
  for (const Symbol& s : symbols) {
    if (!s.removed) out.push_back(s.id);
  }
}

}  // namespace specstack::tok
