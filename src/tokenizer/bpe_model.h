// tokenizer.json "model" of type BPE: vocab + ranked merges, with
// byte_fallback (<0xXX> pieces), unk_token / fuse_unk, ignore_merges and the
// continuing_subword_prefix / end_of_word_suffix decorations.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/token_id_map.h"

namespace specstack::tok {

class BpeModel {
 public:
  static Result<BpeModel> parse(const Json& json, const std::string& path);

  // Appends the ids of one pre-tokenized word.
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr when id has no vocab entry.
  const std::string* id_to_token(int32_t id) const;
  int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }  // max id + 1

 private:
  struct MergeTarget {
    int32_t rank;
    int32_t new_id;
  };
  struct Symbol {
    int32_t id;
    int32_t prev;  // index of the previous live symbol, -1 if none
    int32_t next;  // index of the next live symbol, -1 if none
    bool removed;  // merged into its left neighbour
  };

  static uint64_t pair_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  Status parse_merges(const Json& merges, const std::string& path);
  void initial_symbols(std::string_view word, std::vector<Symbol>& symbols) const;
  void merge_symbols(std::vector<Symbol>& symbols) const;

  TokenIdMap vocab_;
  std::vector<std::string> id_to_token_;
  std::vector<bool> has_token_;
  std::unordered_map<uint64_t, MergeTarget> merges_;  // (left id, right id) -> merge
  std::array<int32_t, 256> byte_fallback_ids_{};      // <0xXX> ids, -1 when absent
  std::optional<int32_t> unk_id_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
};

}  // namespace specstack::tok
