// The tokenizer of a GGUF file, as the tokenizer.json / tokenizer_config.json
// texts the existing loader reads (one tokenizer implementation, two file
// formats). llama.cpp's metadata maps onto HF's pipeline like this:
//  * tokenizer.ggml.model "gpt2": byte-level BPE over tokenizer.ggml.merges,
//    pre-tokenized by the regex that tokenizer.ggml.pre names (llama-bpe /
//    llama3, qwen2, gpt-2 / default);
//  * "llama": SentencePiece BPE with byte fallback; the merges are derived
//    from the scores exactly as HF's SentencePiece converter does (every
//    split of a piece into two pieces, highest-scoring result first);
//  * token_type CONTROL / USER_DEFINED become added tokens (special or not),
//    bos/eos/unk ids, add_bos_token / add_eos_token and chat_template become
//    the post-processor and tokenizer_config.json.
#pragma once

#include <string>

#include "base/status.h"
#include "gguf/gguf_file.h"

namespace specstack {

struct TokenizerJsonTexts {
  std::string tokenizer_json;
  std::string tokenizer_config_json;
};

Result<TokenizerJsonTexts> tokenizer_json_from_gguf(const gguf::Header& header);

}  // namespace specstack
