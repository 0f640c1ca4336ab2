// JSON schema -> GBNF grammar (grammar/gbnf_parser.h), for response_format
// json_schema / json_object.
//
// Supported: type (object, array, string, number, integer, boolean, null, or a
// list of them), properties + required (properties in declared order: pass the
// schema as an ordered_json parsed from the request text),
// additionalProperties (strict: false unless given, as OpenAI strict mode;
// non-strict: true unless given, as JSON schema; true or a schema allows extra
// keys after the declared ones), enum, const, items + minItems + maxItems,
// minLength + maxLength, format (date, time, date-time, uuid), pattern
// (anchored ^...$ regexes: literals, ., classes, \d \w \s, groups, |, * + ?
// {m,n}), anyOf, oneOf (only when its branches are disjoint, see
// grammar/schema_disjoint.h: then alternation is exact), minimum / maximum /
// exclusiveMinimum / exclusiveMaximum on integers (grammar/integer_range.h;
// on numbers they are an error), $ref to #/$defs/... or #/definitions/...
// (recursive ones too). Annotations (title, description, default, examples,
// $schema, $id, $comment) are ignored. Any other keyword is an error naming it.
//
// Whitespace: between tokens at most one optional space or one newline with
// up to 20 spaces/tabs of indent (llama.cpp's policy), so compact and
// pretty-printed JSON both match and a model cannot pad forever; none before
// or after the root value (the document ends at its last byte). Numbers, as
// in llama.cpp, have at most 16 integer and 16 fraction digits, and (unlike
// llama.cpp) at most 2 exponent digits, so every number fits a double.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"

namespace specstack::grammar {

struct JsonSchemaOptions {
  bool strict = true;  // see additionalProperties above
  // The rule matching the document. Another name lets a caller embed the
  // document in a grammar of its own (tool calls wrap it in markers).
  std::string root_rule = "root";
  std::string rule_prefix = "s-";  // of the rules made for the schema
  // Append the shared rules (ws, string, value, ...). Off when several
  // schemas go into one grammar, which then appends
  // json_schema_primitives_gbnf() once.
  bool with_primitives = true;
};

// The grammar text; errors name the keyword and its JSON pointer.
Result<std::string> json_schema_to_gbnf(const nlohmann::ordered_json& schema,
                                        const JsonSchemaOptions& options = {});

// The shared rules every schema grammar refers to.
std::string json_schema_primitives_gbnf();

// Any JSON object (response_format json_object).
std::string json_object_gbnf();

}  // namespace specstack::grammar
