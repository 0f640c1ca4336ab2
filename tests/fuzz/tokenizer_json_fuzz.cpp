// libFuzzer target: Tokenizer::from_json on arbitrary bytes. A file that
// loads must then encode, decode and stream-decode without crashing, and its
// invariants must hold: encode gives ids below vocab_size, decode and every
// streamed piece are valid UTF-8, and the streamed pieces sum to decode().
// Seed corpus: tests/fuzz/corpus/tokenizer_json/.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

void check_stream(const specstack::Tokenizer& tokenizer, const std::vector<int32_t>& ids,
                  bool skip_special_tokens) {
  const std::string expected = tokenizer.decode(ids, skip_special_tokens);
  if (!specstack::tok::is_valid_utf8(expected)) std::abort();
  specstack::StreamDecoder stream(tokenizer, skip_special_tokens);
  std::string text;
  for (const int32_t id : ids) {
    const std::string piece = stream.push(id);
    if (!specstack::tok::is_valid_utf8(piece)) std::abort();
    text += piece;
  }
  text += stream.flush();
  if (text != expected) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view json(reinterpret_cast<const char*>(data), size);
  auto tokenizer = specstack::Tokenizer::from_json(json, "");
  if (!tokenizer.ok()) {
    if (tokenizer.message().empty()) std::abort();
    return 0;
  }
  const specstack::Tokenizer& t = *tokenizer;
  const int32_t vocab_size = t.vocab_size();
  for (const std::string_view text :
       {"Hello world! 123 <s>  ", "the cat\n\tis  in", "", "é你😀\xE2\x80"}) {
    for (const bool add_special : {false, true}) {
      const std::vector<int32_t> ids = t.encode(text, add_special);
      for (const int32_t id : ids) {
        if (id < 0 || id >= vocab_size) std::abort();
      }
      check_stream(t, ids, false);
      check_stream(t, ids, true);
    }
  }
  // Arbitrary ids, including unknown ones, must decode too.
  std::vector<int32_t> ids;
  for (size_t i = 0; i < 16; ++i)
    ids.push_back(static_cast<int32_t>(i * 7919 % (vocab_size + 3)) - 1);
  check_stream(t, ids, false);
  check_stream(t, ids, true);
  return 0;
}
