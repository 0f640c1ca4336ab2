// The library a chat template can call: jinja2's filters and tests, Python's
// str/dict methods, attribute and item access with jinja2's sandbox rules,
// and the globals transformers provides (raise_exception, strftime_now) next
// to jinja2's own (range, namespace, dict). Filters and tests are resolved by
// name once, at parse time, through constant tables.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "chat/jinja_value.h"

namespace specstack::jinja {

// Builtins that can multiply their input's size (indent, join, replace,
// tojson) stop at this many bytes; the interpreter's own limit is lower.
inline constexpr size_t kMaxBuiltinBytes = size_t{64} << 20;

using FilterFn = Result<Value> (*)(const Value& input, const CallArgs& args);
using TestFn = Result<bool> (*)(const Value& input, const CallArgs& args);

// nullptr when jinja2 (as configured by transformers) has no such filter/test
// in this subset.
FilterFn find_filter(std::string_view name);
TestFn find_test(std::string_view name);
// The sequence filters' half of find_filter (jinja_seq_filters.cpp).
FilterFn find_sequence_filter(std::string_view name);

// Python-style argument binding: positional then keyword onto `params`.
// Unbound parameters come back undefined; extra or unknown arguments are an Error.
Result<std::vector<Value>> bind_args(const CallArgs& args,
                                     std::initializer_list<std::string_view> params,
                                     std::string_view fn_name);

// obj.name as jinja2's sandbox resolves it: methods of str/dict first, then
// dict keys / namespace attributes; anything missing is undefined. Undefined
// objects are an Error (jinja2 raises UndefinedError).
Result<Value> get_attr(const Value& object, std::string_view name);
// obj[key]: items first, then (for string keys) attributes; missing is undefined.
Result<Value> get_item(const Value& object, const Value& key);
// obj[start:stop:step] on lists, tuples and strings (Python semantics).
Result<Value> get_slice(const Value& object, const Value& start, const Value& stop,
                        const Value& step);
// jinja2's attribute getter for filters: "a.b.0" walks get_item per part.
Result<Value> get_attr_path(const Value& object, std::string_view path);

// Globals every template sees, in the order they shadow nothing.
std::vector<std::pair<std::string, Value>> global_functions();

}  // namespace specstack::jinja
