#include "tokenizer/vocab_check.h"

#include <algorithm>
#include <optional>
#include <string>

namespace specstack {
namespace {

std::string id_text(const std::optional<int32_t>& id) {
  return id ? std::to_string(*id) : std::string("none");
}

}  // namespace

Status check_same_vocabulary(const Tokenizer& a, const Tokenizer& b) {
  const int32_t n_a = a.vocab_size();
  const int32_t n_b = b.vocab_size();
  // Ids are compared before sizes so that two unrelated vocabularies are
  // reported by the first id that tells them apart, not just by their sizes.
  const int32_t n_common = std::min(n_a, n_b);
  for (int32_t id = 0; id < n_common; ++id) {
    const std::string token_a = a.id_to_token(id);
    const std::string token_b = b.id_to_token(id);
    if (token_a == token_b) continue;
    if (n_a != n_b) {
      return errorf("id {} differs: {:?} vs {:?} (vocab_size {} vs {})", id, token_a, token_b, n_a,
                    n_b);
    }
    return errorf("id {} differs: {:?} vs {:?}", id, token_a, token_b);
  }
  if (n_a != n_b) {
    // The shorter vocabulary is a prefix of the longer one: name the first
    // id only one of them has.
    const Tokenizer& longer = n_a > n_b ? a : b;
    return errorf("vocab_size differs: {} vs {} (id {} is {:?} in only one of them)", n_a, n_b,
                  n_common, longer.id_to_token(n_common));
  }
  if (a.bos_id() != b.bos_id()) {
    return errorf("bos token id differs: {} vs {}", id_text(a.bos_id()), id_text(b.bos_id()));
  }
  if (a.eos_id() != b.eos_id()) {
    return errorf("eos token id differs: {} vs {}", id_text(a.eos_id()), id_text(b.eos_id()));
  }
  return Status::ok_status();
}

}  // namespace specstack
