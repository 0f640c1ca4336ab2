#include "chat/jinja_marked.h"

#include "chat/jinja_util.h"
#include "chat/py_string.h"

namespace specstack::jinja {

void MarkedText::append(std::string_view piece, std::span<const TextRange> piece_user) {
  append_shifted(user, piece_user, text.size());
  text.append(piece);
}

void MarkedText::append(const Value& value) {
  if (value.is_string()) {
    append(value.as_string(), value.user_ranges());
    return;
  }
  const Value printed = to_marked_str(value);
  append(printed.as_string(), printed.user_ranges());
}

Value to_marked_str(const Value& value) {
  if (value.is_string()) return value;
  std::string text = to_str(value);
  return value.holds_user_text() ? Value::user_text(std::move(text))
                                 : Value::string(std::move(text));
}

Value located_piece(const Value& s, std::string piece, size_t from) {
  if (s.user_ranges().empty() || piece.empty()) return Value::string(std::move(piece));
  const size_t at = s.as_string().find(piece, from);
  // Callers pass substrings of s, so it is always found; if not, the safe side.
  if (at == std::string::npos) return Value::user_text(std::move(piece));
  const size_t end = at + piece.size();
  return Value::string(std::move(piece), slice_ranges(s.user_ranges(), at, end));
}

Value split_pieces(const Value& s, std::vector<std::string> pieces, size_t sep_size) {
  if (s.user_ranges().empty()) return string_list(pieces);
  std::vector<Value> values;
  values.reserve(pieces.size());
  size_t cursor = 0;
  for (std::string& piece : pieces) {
    const size_t at = sep_size > 0 ? cursor : s.as_string().find(piece, cursor);
    if (at > s.as_string().size() || s.as_string().compare(at, piece.size(), piece) != 0) {
      // Not where a split puts it (cannot happen): the safe side.
      values.push_back(Value::user_text(std::move(piece)));
      continue;
    }
    const size_t end = at + piece.size();
    values.push_back(Value::string(std::move(piece), slice_ranges(s.user_ranges(), at, end)));
    cursor = end + sep_size;
  }
  return Value::list(std::move(values));
}

Value pick_chars(const Value& s, const std::u32string& chars, const std::vector<size_t>& picks) {
  MarkedText out;
  if (s.user_ranges().empty()) {
    for (size_t i : picks) append_utf8(out.text, chars[i]);
    return out.take();
  }
  // Byte offset of every character: decode_utf8/append_utf8 round-trip bytes.
  std::vector<size_t> offsets(chars.size() + 1, 0);
  std::string one;
  for (size_t i = 0; i < chars.size(); ++i) {
    one.clear();
    append_utf8(one, chars[i]);
    offsets[i + 1] = offsets[i] + one.size();
  }
  for (size_t i : picks) {
    const size_t begin = offsets[i];
    const size_t end = offsets[i + 1];
    out.append(std::string_view(s.as_string()).substr(begin, end - begin),
               slice_ranges(s.user_ranges(), begin, end));
  }
  return out.take();
}

Value derived_string(std::string text, std::initializer_list<const Value*> inputs) {
  for (const Value* input : inputs) {
    if (input->holds_user_text()) return Value::user_text(std::move(text));
  }
  return Value::string(std::move(text));
}

}  // namespace specstack::jinja
