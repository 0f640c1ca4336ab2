// libFuzzer target: parse_gbnf on arbitrary bytes. A rejected grammar must say
// why; an accepted one must be safe to run: the matcher is fed the input's
// own bytes (stopping at the first rejected one) and asked for its state.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "grammar/gbnf_parser.h"
#include "grammar/matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  // Small limits keep each run fast; the limits themselves are part of what is tested.
  specstack::grammar::GrammarLimits limits;
  limits.max_repetition = 64;
  limits.max_elements = 20000;
  auto g = specstack::grammar::parse_gbnf(text, limits);
  if (!g.ok()) {
    if (g.message().empty()) std::abort();
    return 0;
  }
  auto grammar = std::make_shared<const specstack::grammar::Grammar>(std::move(g).value());
  if (grammar->root >= grammar->rules.size()) std::abort();
  specstack::grammar::GrammarMatcher matcher(grammar);
  for (size_t i = 0; i < size && i < 256; ++i) {
    if (!matcher.accept_byte(data[i])) break;
  }
  (void)matcher.can_end();
  (void)matcher.next_bytes();
  (void)matcher.stacks().key();
  return 0;
}
