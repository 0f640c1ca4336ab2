// libFuzzer target: the JSON-schema compiler on arbitrary JSON. A rejected
// schema must say why; an accepted one must compile to GBNF that parses (the
// compiler's output is never a syntax error) and whose matcher runs.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <nlohmann/json.hpp>
#include <string_view>

#include "grammar/gbnf_parser.h"
#include "grammar/json_schema.h"
#include "grammar/matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto schema = nlohmann::ordered_json::parse(data, data + size, nullptr, false);
  if (schema.is_discarded()) return 0;
  auto gbnf = specstack::grammar::json_schema_to_gbnf(schema);
  if (!gbnf.ok()) {
    if (gbnf.message().empty()) std::abort();
    return 0;
  }
  auto g = specstack::grammar::parse_gbnf(*gbnf);
  if (!g.ok()) {
    // Left recursion through $ref (a schema that is itself) is a legitimate
    // rejection; anything else means the compiler wrote bad GBNF.
    if (g.message().find("left-recursive") == std::string::npos) std::abort();
    return 0;
  }
  specstack::grammar::GrammarMatcher matcher(
      std::make_shared<const specstack::grammar::Grammar>(std::move(g).value()));
  for (char c : std::string_view("{\"a\": [1, \"x\", null, true], \"b\": {}}")) {
    if (!matcher.accept_byte(static_cast<uint8_t>(c))) break;
  }
  return 0;
}
