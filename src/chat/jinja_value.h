// Runtime values of the chat-template interpreter, modelled on the Python
// objects jinja2 sees: undefined, None, bool, int, float, str, list/tuple,
// dict (insertion-ordered), namespace objects and callables. Lists and dicts
// are immutable and shared (transformers renders in an immutable sandbox);
// only namespace attributes can change, through {% set ns.attr = ... %}.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "base/status.h"
#include "base/text_ranges.h"

namespace specstack::jinja {

class Value;

struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

struct ListData {
  std::vector<Value> items;
  bool is_tuple = false;   // only changes how it prints: (1, 2) vs [1, 2]
  uint32_t depth = 1;      // nesting depth, cached to bound recursion cheaply
  bool user_text = false;  // some string inside holds user text (cached like depth)
};

struct DictData {
  std::vector<std::pair<Value, Value>> entries;  // insertion order, unique keys
  uint32_t depth = 1;
  bool user_text = false;  // recomputed by Value::dict, like depth
  const Value* find(const Value& key) const;
  const Value* find(std::string_view key) const;
};

// A string and which of its bytes are user text: bytes that came from the
// request (messages, tools) rather than from the template. The tokenizer never
// turns user text into special tokens, so a message cannot forge the
// template's markup. Substring operations keep the ranges exact, joins shift
// them, and other transformations mark their whole result (jinja_marked.h).
struct StringData {
  std::string text;
  TextRanges user;  // empty for template text: no allocation
};

struct NamespaceData {
  DictData attrs;  // string keys only
};

using NativeFn = std::function<Result<Value>(const CallArgs&)>;
struct FunctionData {
  std::string name;
  NativeFn fn;
  // Errors from macros already carry their location and raise_exception's
  // message is for the user verbatim, so the caller must not re-wrap them.
  bool errors_are_final = false;
};

class Value {
 public:
  enum class Kind : uint8_t {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kList,
    kDict,
    kNamespace,
    kFunction,
  };

  Value() : data_(UndefinedData{}) {}
  // hint: what was looked up ("'foo' is undefined"), for error messages.
  static Value undefined(std::string hint);
  static Value none();
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  // user: sorted, merged byte ranges of s that are user text.
  static Value string(std::string s, TextRanges user);
  // A string that is user text as a whole.
  static Value user_text(std::string s);
  static Value list(std::vector<Value> items, bool is_tuple = false);
  static Value dict(DictData data);  // data.depth is recomputed
  static Value make_namespace(DictData attrs);
  static Value function(std::string name, NativeFn fn, bool errors_are_final = false);

  Kind kind() const { return static_cast<Kind>(data_.index()); }
  bool is_undefined() const { return kind() == Kind::kUndefined; }
  bool is_none() const { return kind() == Kind::kNone; }
  bool is_bool() const { return kind() == Kind::kBool; }
  bool is_int() const { return kind() == Kind::kInt; }
  bool is_float() const { return kind() == Kind::kFloat; }
  bool is_string() const { return kind() == Kind::kString; }
  bool is_list() const { return kind() == Kind::kList; }
  bool is_dict() const { return kind() == Kind::kDict; }
  bool is_namespace() const { return kind() == Kind::kNamespace; }
  bool is_function() const { return kind() == Kind::kFunction; }
  // bool, int and float all take part in arithmetic, as in Python.
  bool is_number() const { return is_bool() || is_int() || is_float(); }

  bool as_bool() const { return std::get<bool>(data_); }
  int64_t as_int() const;    // bool or int
  double as_double() const;  // any number
  const std::string& as_string() const {
    return std::get<std::shared_ptr<const StringData>>(data_)->text;
  }
  // The user-text ranges of a string (empty for every other kind).
  const TextRanges& user_ranges() const;
  // Whether any string in this value (itself, or inside containers) holds
  // user text. O(1) for strings, lists and dicts (cached); namespaces walk.
  bool holds_user_text() const;
  const ListData& as_list() const { return *std::get<std::shared_ptr<const ListData>>(data_); }
  const DictData& as_dict() const { return *std::get<std::shared_ptr<const DictData>>(data_); }
  NamespaceData& as_namespace() const { return *std::get<std::shared_ptr<NamespaceData>>(data_); }
  const FunctionData& as_function() const {
    return *std::get<std::shared_ptr<const FunctionData>>(data_);
  }
  std::string undefined_hint() const;

  // Nesting depth of containers (0 for scalars).
  uint32_t depth() const;
  // Python truthiness; undefined is false.
  bool truthy() const;
  // Python type name for error messages ('str', 'NoneType', ...).
  std::string type_name() const;
  // Identity for namespaces and functions, as Python's `is`.
  const void* identity() const;

 private:
  struct UndefinedData {
    std::shared_ptr<const std::string> hint;  // null: no message
  };
  // Strings are shared like the containers: templates copy values freely
  // (lookups, loop items), and a copy must never cost a string's length.
  using Data = std::variant<UndefinedData, std::monostate, bool, int64_t, double,
                            std::shared_ptr<const StringData>, std::shared_ptr<const ListData>,
                            std::shared_ptr<const DictData>, std::shared_ptr<NamespaceData>,
                            std::shared_ptr<const FunctionData>>;
  explicit Value(Data data) : data_(std::move(data)) {}
  Data data_;
};

// str(value) as Python prints it; undefined renders as "". Printing a
// container stops growing past kMaxPrintedBytes (callers reject anything that
// large), so a list holding one big string many times cannot exhaust memory.
inline constexpr size_t kMaxPrintedBytes = size_t{64} << 20;
std::string to_str(const Value& value);
// repr(value), used for items inside printed containers.
std::string to_repr(const Value& value);
// Python ==.
bool values_equal(const Value& a, const Value& b);
// Python ordering (<0, 0, >0); TypeError-like Error for unorderable pairs.
Result<int> compare_values(const Value& a, const Value& b);
// The items a for-loop visits: list items, dict keys, string characters;
// undefined iterates as empty (jinja2's Undefined), others are an Error.
// Strings longer than kMaxIteratedChars bytes are an Error.
inline constexpr size_t kMaxIteratedChars = size_t{1} << 20;
Result<std::vector<Value>> iterate(const Value& value);
// len(value); undefined has length 0.
Result<int64_t> length_of(const Value& value);
// Python's `needle in haystack`.
Result<bool> contains(const Value& haystack, const Value& needle);

}  // namespace specstack::jinja
