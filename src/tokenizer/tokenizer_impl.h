// The parts of a loaded tokenizer, in pipeline order (HF tokenizers'
// TokenizerImpl): added tokens -> normalizer -> pre-tokenizer -> BPE model ->
// post-processor; decoding goes ids -> token strings -> decoder.
#pragma once

#include <memory>
#include <string>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer_config.h"

namespace specstack {

struct TokenizerImpl {
  TokenizerImpl(tok::BpeModel model, tok::AddedVocabulary added)
      : model(std::move(model)), added(std::move(added)) {}

  tok::BpeModel model;
  tok::AddedVocabulary added;
  std::unique_ptr<tok::Normalizer> normalizer;         // may be null
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer;    // may be null
  std::unique_ptr<tok::PostProcessor> post_processor;  // may be null
  std::unique_ptr<tok::Decoder> decoder;               // may be null
  TokenizerConfig config;
  int32_t vocab_size = 0;

  // The string decode() feeds to the decoder for id, or nullptr when decode
  // drops the id (unknown, or special while skipping special tokens).
  const std::string* token_for_decode(int32_t id, bool skip_special_tokens) const {
    if (const tok::AddedToken* added_token = added.find_by_id(id)) {
      // HF 0.23 compares the decode form with the special-token names, so it
      // fails to skip normalized special tokens; we skip by id.
      return skip_special_tokens && added_token->special ? nullptr : &added_token->decode_form;
    }
    return model.id_to_token(id);
  }
};

}  // namespace specstack
