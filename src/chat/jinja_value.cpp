#include "chat/jinja_value.h"

#include <algorithm>

#include "chat/jinja_marked.h"
#include "chat/py_string.h"

namespace specstack::jinja {
namespace {

uint32_t max_depth(const std::vector<Value>& items) {
  uint32_t depth = 0;
  for (const Value& item : items) depth = std::max(depth, item.depth());
  return depth;
}

uint32_t max_depth(const DictData& dict) {
  uint32_t depth = 0;
  for (const auto& [key, value] : dict.entries)
    depth = std::max({depth, key.depth(), value.depth()});
  return depth;
}

bool any_user_text(const std::vector<Value>& items) {
  return std::any_of(items.begin(), items.end(),
                     [](const Value& item) { return item.holds_user_text(); });
}

bool any_user_text(const DictData& dict) {
  return std::any_of(dict.entries.begin(), dict.entries.end(), [](const auto& entry) {
    return entry.first.holds_user_text() || entry.second.holds_user_text();
  });
}

std::string join_repr(const std::vector<Value>& items) {
  std::string out;
  for (size_t i = 0; i < items.size() && out.size() <= kMaxPrintedBytes; ++i) {
    if (i > 0) out += ", ";
    out += to_repr(items[i]);
  }
  return out;
}

std::string dict_repr(const DictData& dict) {
  std::string out = "{";
  for (size_t i = 0; i < dict.entries.size() && out.size() <= kMaxPrintedBytes; ++i) {
    if (i > 0) out += ", ";
    out += to_repr(dict.entries[i].first);
    out += ": ";
    out += to_repr(dict.entries[i].second);
  }
  out += '}';
  return out;
}

bool both_integral(const Value& a, const Value& b) {
  return (a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool());
}

}  // namespace

const Value* DictData::find(const Value& key) const {
  for (const auto& [k, v] : entries) {
    if (values_equal(k, key)) return &v;
  }
  return nullptr;
}

const Value* DictData::find(std::string_view key) const {
  for (const auto& [k, v] : entries) {
    if (k.is_string() && k.as_string() == key) return &v;
  }
  return nullptr;
}

Value Value::undefined(std::string hint) {
  return Value(Data(UndefinedData{std::make_shared<const std::string>(std::move(hint))}));
}
Value Value::none() {
  return Value(Data(std::monostate{}));
}
Value Value::boolean(bool b) {
  return Value(Data(b));
}
Value Value::integer(int64_t i) {
  return Value(Data(i));
}
Value Value::floating(double f) {
  return Value(Data(f));
}
Value Value::string(std::string s) {
  return Value(Data(std::shared_ptr<const StringData>(
      std::make_shared<const StringData>(StringData{std::move(s), {}}))));
}

Value Value::string(std::string s, TextRanges user) {
  return Value(Data(std::shared_ptr<const StringData>(
      std::make_shared<const StringData>(StringData{std::move(s), std::move(user)}))));
}

Value Value::user_text(std::string s) {
  TextRanges user;
  append_range(user, 0, s.size());
  return string(std::move(s), std::move(user));
}

const TextRanges& Value::user_ranges() const {
  static const TextRanges kNone;
  if (!is_string()) return kNone;
  return std::get<std::shared_ptr<const StringData>>(data_)->user;
}

bool Value::holds_user_text() const {
  switch (kind()) {
    case Kind::kString:
      return !user_ranges().empty();
    case Kind::kList:
      return as_list().user_text;
    case Kind::kDict:
      return as_dict().user_text;
    case Kind::kNamespace:
      return any_user_text(as_namespace().attrs);
    default:
      return false;
  }
}

std::string Value::undefined_hint() const {
  const auto& hint = std::get<UndefinedData>(data_).hint;
  return hint ? *hint : std::string();
}

Value Value::list(std::vector<Value> items, bool is_tuple) {
  auto data = std::make_shared<ListData>();
  data->depth = 1 + max_depth(items);
  data->user_text = any_user_text(items);
  data->items = std::move(items);
  data->is_tuple = is_tuple;
  return Value(Data(std::shared_ptr<const ListData>(std::move(data))));
}

Value Value::dict(DictData dict) {
  dict.depth = 1 + max_depth(dict);
  dict.user_text = any_user_text(dict);
  return Value(Data(std::shared_ptr<const DictData>(std::make_shared<DictData>(std::move(dict)))));
}

Value Value::make_namespace(DictData attrs) {
  return Value(Data(std::make_shared<NamespaceData>(NamespaceData{std::move(attrs)})));
}

Value Value::function(std::string name, NativeFn fn, bool errors_are_final) {
  return Value(Data(std::shared_ptr<const FunctionData>(std::make_shared<FunctionData>(
      FunctionData{std::move(name), std::move(fn), errors_are_final}))));
}

int64_t Value::as_int() const {
  return is_bool() ? (as_bool() ? 1 : 0) : std::get<int64_t>(data_);
}

double Value::as_double() const {
  return is_float() ? std::get<double>(data_) : static_cast<double>(as_int());
}

uint32_t Value::depth() const {
  switch (kind()) {
    case Kind::kList:
      return as_list().depth;
    case Kind::kDict:
      return as_dict().depth;
    case Kind::kNamespace:
      // Namespaces never hold namespaces (the interpreter refuses), so this
      // walk is bounded by the depth limit on ordinary containers. The
      // namespace itself does not count: what it stores was checked already.
      return max_depth(as_namespace().attrs);
    default:
      return 0;
  }
}

bool Value::truthy() const {
  switch (kind()) {
    case Kind::kUndefined:
    case Kind::kNone:
      return false;
    case Kind::kBool:
      return as_bool();
    case Kind::kInt:
      return as_int() != 0;
    case Kind::kFloat:
      return as_double() != 0.0;
    case Kind::kString:
      return !as_string().empty();
    case Kind::kList:
      return !as_list().items.empty();
    case Kind::kDict:
      return !as_dict().entries.empty();
    case Kind::kNamespace:
    case Kind::kFunction:
      return true;
  }
  return false;
}

std::string Value::type_name() const {
  switch (kind()) {
    case Kind::kUndefined:
      return "Undefined";
    case Kind::kNone:
      return "NoneType";
    case Kind::kBool:
      return "bool";
    case Kind::kInt:
      return "int";
    case Kind::kFloat:
      return "float";
    case Kind::kString:
      return "str";
    case Kind::kList:
      return as_list().is_tuple ? "tuple" : "list";
    case Kind::kDict:
      return "dict";
    case Kind::kNamespace:
      return "Namespace";
    case Kind::kFunction:
      return "function";
  }
  return "object";
}

const void* Value::identity() const {
  if (is_namespace()) return std::get<std::shared_ptr<NamespaceData>>(data_).get();
  if (is_function()) return std::get<std::shared_ptr<const FunctionData>>(data_).get();
  if (is_list()) return &as_list();
  if (is_dict()) return &as_dict();
  return nullptr;
}

std::string to_str(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return value.as_bool() ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(value.as_int());
    case Value::Kind::kFloat:
      return py_float_repr(value.as_double());
    case Value::Kind::kString:
      return value.as_string();
    case Value::Kind::kList: {
      const ListData& list = value.as_list();
      if (!list.is_tuple) return fmt::format("[{}]", join_repr(list.items));
      return fmt::format("({}{})", join_repr(list.items), list.items.size() == 1 ? "," : "");
    }
    case Value::Kind::kDict:
      return dict_repr(value.as_dict());
    case Value::Kind::kNamespace:
      return "<Namespace " + dict_repr(value.as_namespace().attrs) + ">";
    case Value::Kind::kFunction:
      return "<function " + value.as_function().name + ">";
  }
  return "";
}

std::string to_repr(const Value& value) {
  if (value.is_string()) return py_repr_string(value.as_string());
  if (value.is_undefined()) return "Undefined";
  return to_str(value);
}

bool values_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (both_integral(a, b)) return a.as_int() == b.as_int();
    return a.as_double() == b.as_double();
  }
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.as_string() == b.as_string();
    case Value::Kind::kList: {
      const ListData& x = a.as_list();
      const ListData& y = b.as_list();
      if (x.is_tuple != y.is_tuple || x.items.size() != y.items.size()) return false;
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!values_equal(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Kind::kDict: {
      const DictData& x = a.as_dict();
      const DictData& y = b.as_dict();
      if (x.entries.size() != y.entries.size()) return false;
      for (const auto& [key, v] : x.entries) {
        const Value* other = y.find(key);
        if (other == nullptr || !values_equal(v, *other)) return false;
      }
      return true;
    }
    default:
      return a.identity() == b.identity();
  }
}

Result<int> compare_values(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (both_integral(a, b))
      return a.as_int() < b.as_int() ? -1 : (a.as_int() > b.as_int() ? 1 : 0);
    const double x = a.as_double();
    const double y = b.as_double();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (values_equal(x[i], y[i])) continue;
      return compare_values(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  return errorf("cannot compare '{}' with '{}'", a.type_name(), b.type_name());
}

Result<std::vector<Value>> iterate(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return std::vector<Value>{};
    case Value::Kind::kList:
      return value.as_list().items;
    case Value::Kind::kDict: {
      std::vector<Value> keys;
      for (const auto& entry : value.as_dict().entries) keys.push_back(entry.first);
      return keys;
    }
    case Value::Kind::kString: {
      // One value per character is ~100 bytes each: refuse huge strings.
      if (value.as_string().size() > kMaxIteratedChars) {
        return errorf("string too long to iterate ({} bytes)", value.as_string().size());
      }
      // Each character keeps the user-text ranges of its bytes.
      std::vector<Value> chars;
      size_t offset = 0;
      for (char32_t c : decode_utf8(value.as_string())) {
        std::string one;
        append_utf8(one, c);  // round-trips the original bytes
        const size_t size = one.size();
        chars.push_back(value.user_ranges().empty()
                            ? Value::string(std::move(one))
                            : Value::string(std::move(one), slice_ranges(value.user_ranges(),
                                                                         offset, offset + size)));
        offset += size;
      }
      return chars;
    }
    default:
      return errorf("'{}' object is not iterable", value.type_name());
  }
}

Result<int64_t> length_of(const Value& value) {
  switch (value.kind()) {
    case Value::Kind::kUndefined:
      return int64_t{0};
    case Value::Kind::kString:
      return static_cast<int64_t>(utf8_length(value.as_string()));
    case Value::Kind::kList:
      return static_cast<int64_t>(value.as_list().items.size());
    case Value::Kind::kDict:
      return static_cast<int64_t>(value.as_dict().entries.size());
    default:
      return errorf("object of type '{}' has no len()", value.type_name());
  }
}

Result<bool> contains(const Value& haystack, const Value& needle) {
  switch (haystack.kind()) {
    case Value::Kind::kUndefined:
      return false;
    case Value::Kind::kString:
      if (!needle.is_string()) {
        return errorf("'in <string>' requires string as left operand, not {}", needle.type_name());
      }
      return haystack.as_string().find(needle.as_string()) != std::string::npos;
    case Value::Kind::kList:
      for (const Value& item : haystack.as_list().items) {
        if (values_equal(item, needle)) return true;
      }
      return false;
    case Value::Kind::kDict:
      return haystack.as_dict().find(needle) != nullptr;
    default:
      return errorf("argument of type '{}' is not iterable", haystack.type_name());
  }
}

}  // namespace specstack::jinja
