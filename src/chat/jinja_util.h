// Small helpers shared by the builtin filters, tests and methods.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "chat/jinja_value.h"

namespace specstack::jinja {

// The message jinja2 would raise when an undefined value is used.
std::string undefined_message(const Value& undefined);
// nullopt for undefined/None, the string for str, an Error otherwise.
Result<std::optional<std::string>> optional_string(const Value& v, std::string_view what);
// fallback for undefined/None, the integer for int/bool, an Error otherwise.
Result<int64_t> int_or(const Value& v, int64_t fallback, std::string_view what);
Value string_list(const std::vector<std::string>& items);
// [(key, value), ...] as a list of 2-tuples, like dict.items().
Value dict_item_list(const DictData& dict);
// Whether a namespace occurs anywhere inside v (namespaces must not nest,
// which keeps every value acyclic and its depth bounded).
bool contains_namespace(const Value& v);
// str.replace that refuses results longer than kMaxBuiltinBytes.
Result<std::string> checked_replace(std::string_view text, std::string_view old,
                                    std::string_view with, int64_t count);

}  // namespace specstack::jinja
