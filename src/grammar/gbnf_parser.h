// The GBNF text form of a grammar (llama.cpp's syntax):
//
//   root  ::= "{" ws pair ("," ws pair)* "}"   # a comment
//   pair  ::= [a-z]+ ws ":" ws ([0-9]{1,3} | "null")
//   ws    ::= [ \t\n]*
//
// Rules `name ::= alternatives`; names are [A-Za-z0-9_-]+. Alternatives are
// separated by |, sequences by spaces; ( ) groups; postfix *, +, ?, {m},
// {m,}, {m,n}; "string" literals and [character classes] (ranges a-z,
// negation [^...]) over Unicode code points, `.` any code point; escapes
// \n \r \t \\ \" \[ \] \- \^ \xHH \uHHHH \UHHHHHHHH (code points, UTF-8
// encoded). Newlines are whitespace: a rule ends where the next `name ::=`
// begins. The start rule is `root`.
#pragma once

#include <string_view>

#include "base/status.h"
#include "grammar/grammar.h"
#include "grammar/grammar_builder.h"

namespace specstack::grammar {

// Errors name the line and column and what was expected there.
Result<Grammar> parse_gbnf(std::string_view text, const GrammarLimits& limits = {});

}  // namespace specstack::grammar
