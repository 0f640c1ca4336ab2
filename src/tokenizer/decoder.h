// tokenizer.json "decoder": ByteLevel, Metaspace, and Sequence of Replace /
// ByteFallback / Fuse / Strip (the SentencePiece-style chain). A decoder maps
// the token strings of the ids to the final text pieces, which are joined.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "tokenizer/json_fields.h"

namespace specstack::tok {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // HF's decode_chain: token strings in, text pieces out (same vector).
  virtual void decode_chain(std::vector<std::string>& tokens) const = 0;
  // Whether consecutive <0xXX> tokens are decoded together (ByteFallback), so
  // that the text of such a run is final only once the run has ended.
  virtual bool joins_byte_tokens() const { return false; }
  // The raw bytes one token contributes in the middle of a text (grammar
  // masks walk these): like decode_chain on {token} without turning partial
  // UTF-8 into U+FFFD, and without the first-token rules (Strip, Metaspace's
  // dropped prefix) that only apply at the start of a text.
  virtual void token_bytes(std::string& token) const {
    std::vector<std::string> one = {std::move(token)};
    decode_chain(one);
    token.clear();
    for (std::string& piece : one) token += piece;
  }
};

// The byte a "<0xXX>" token stands for, or -1 for any other token.
int byte_token_value(const std::string& token);

// A null json gives a nullptr decoder (HF then joins the tokens with " ").
Result<std::unique_ptr<Decoder>> parse_decoder(const Json& json, const std::string& path,
                                               int depth = 0);

}  // namespace specstack::tok
