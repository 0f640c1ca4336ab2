// JSON schema `pattern` (an ECMA regex subset) -> a GBNF expression over the
// JSON text of the string's content (so a quote in the pattern becomes \"
// in the output). Supported: ^...$ anchoring (required: JSON schema patterns
// search, and only an anchored pattern means the same as a grammar), literal
// characters and escapes, `.`, [classes] with ranges and negation, \d \w \s
// (and \D \W \S outside classes), groups ( ) and (?: ), |, and the
// quantifiers * + ? {m} {m,} {m,n} (lazy forms match the same strings).
// Classes never admit the quote, backslash or control characters, which a
// JSON string would have to escape. Anything else is an error naming it.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace specstack::grammar {

Result<std::string> pattern_to_gbnf(std::string_view pattern);

}  // namespace specstack::grammar
