// User-text provenance through the interpreter's string operations. Strings
// carry the byte ranges that came from the request (StringData::user). The
// rule, applied by every builtin that makes a string:
//  * substrings (slices, indexing, strip, split pieces, a string's
//    characters) keep exactly the ranges that fall inside them;
//  * concatenation (+, ~, join, rendered output) shifts and merges them;
//  * any other transformation of a value that holds user text (replace,
//    upper/lower/title, tojson, indent, str() of a container, ...) marks its
//    whole result as user text -- the safe direction: user text can only
//    ever lose its power to become special tokens, never gain it.
#pragma once

#include <initializer_list>
#include <string>
#include <string_view>
#include <vector>

#include "base/text_ranges.h"
#include "chat/jinja_value.h"

namespace specstack::jinja {

// A string under construction with its user-text ranges.
struct MarkedText {
  std::string text;
  TextRanges user;

  void append(std::string_view piece) { text.append(piece); }  // template text
  void append(std::string_view piece, std::span<const TextRange> piece_user);
  // A value as {{ }} prints it: strings with their ranges, others via to_marked_str.
  void append(const Value& value);
  Value take() { return Value::string(std::move(text), std::move(user)); }
};

// str(value) with provenance: a string is itself; a container that holds user
// text prints as user text as a whole (its repr quotes and escapes the strings,
// so exact ranges would be fragile and gain nothing); scalars are template text.
Value to_marked_str(const Value& value);
// A substring `piece` of string `s` found by searching from byte `from`: for
// results of strip, whose stripped prefix cannot start the piece.
Value located_piece(const Value& s, std::string piece, size_t from = 0);
// The pieces of a split of `s`, in order, as a list of strings with their
// ranges. sep_size > 0: consecutive pieces are separated by exactly that many
// bytes (split/rsplit on a separator); 0: by whitespace or line breaks, which
// cannot start a piece, so each is found by searching on.
Value split_pieces(const Value& s, std::vector<std::string> pieces, size_t sep_size);
// The characters of `s` from `chars` (decode_utf8(s)), picked by code-point
// index, concatenated with their ranges: indexing, slicing, iteration.
Value pick_chars(const Value& s, const std::u32string& chars, const std::vector<size_t>& picks);
// The result of transforming `inputs`: user text as a whole when any of them
// holds user text, template text otherwise.
Value derived_string(std::string text, std::initializer_list<const Value*> inputs);

}  // namespace specstack::jinja
