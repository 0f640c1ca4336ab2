#include <algorithm>

#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace specstack {

namespace {

bool ends_with_replacement(const std::string& text) {
  const std::string_view r = tok::kReplacementChar;
  return text.size() >= r.size() && text.compare(text.size() - r.size(), r.size(), r) == 0;
}

}  // namespace

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string StreamDecoder::push(int32_t id) {
  const TokenizerImpl& impl = *tokenizer_->impl_;
  // Ids that decode drops anyway never enter the window.
  const std::string* token = impl.token_for_decode(id, skip_special_tokens_);
  if (token == nullptr) return std::string();
  ids_.push_back(id);
  if (impl.decoder && impl.decoder->joins_byte_tokens() && tok::byte_token_value(*token) >= 0) {
    return std::string();  // a byte run is final only once it ends
  }
  std::string text = tokenizer_->decode(std::span<const int32_t>(ids_), skip_special_tokens_);
  // Hold back text that may still change: an incomplete UTF-8 sequence at the
  // end (shown as U+FFFD), or a window that no longer extends what was returned.
  if (text.size() <= prefix_text_.size() || ends_with_replacement(text) ||
      text.compare(0, prefix_text_.size(), prefix_text_) != 0) {
    return std::string();
  }
  std::string fresh = text.substr(prefix_text_.size());
  // Slide the window to start at the ids just returned, but only when they
  // decode to something: decoders that strip the first character of their
  // output (SentencePiece's leading space) then strip the same character in
  // every later window, so differences between windows stay exact.
  const std::span<const int32_t> tail(ids_.begin() + static_cast<ptrdiff_t>(read_offset_),
                                      ids_.end());
  std::string tail_text = tokenizer_->decode(tail, skip_special_tokens_);
  if (!tail_text.empty()) {
    ids_.erase(ids_.begin(), ids_.begin() + static_cast<ptrdiff_t>(read_offset_));
    prefix_text_ = std::move(tail_text);
  } else {
    prefix_text_ = std::move(text);
  }
  read_offset_ = ids_.size();
  return fresh;
}

std::string StreamDecoder::flush() {
  std::string fresh;
  if (ids_.size() > read_offset_) {
    const std::string text =
        tokenizer_->decode(std::span<const int32_t>(ids_), skip_special_tokens_);
    if (text.size() > prefix_text_.size() &&
        text.compare(0, prefix_text_.size(), prefix_text_) == 0) {
      fresh = text.substr(prefix_text_.size());
    }
  }
  ids_.clear();
  prefix_text_.clear();
  read_offset_ = 0;
  return fresh;
}

}  // namespace specstack
