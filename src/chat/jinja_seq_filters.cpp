// jinja2's builtin filters over sequences: first/last/list/items/join,
// sort/dictsort/unique/min/max/sum/reverse and select/reject/map.
#include <algorithm>
#include <array>

#include "chat/jinja_builtins.h"
#include "chat/jinja_marked.h"
#include "chat/jinja_util.h"
#include "chat/py_string.h"

namespace specstack::jinja {
namespace {

CallArgs rest_of(const CallArgs& args, size_t skip) {
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + std::min(skip, args.positional.size()),
                         args.positional.end());
  rest.keyword = args.keyword;
  return rest;
}

// first/last of a string without splitting all of it into characters.
std::optional<Value> end_char(const Value& in, bool last) {
  if (!in.is_string()) return std::nullopt;
  const std::u32string chars = decode_utf8(in.as_string());
  if (chars.empty()) return Value::undefined("No first item, sequence was empty.");
  return pick_chars(in, chars, {last ? chars.size() - 1 : 0});
}

Result<Value> f_first(const Value& in, const CallArgs& args) {
  SS_TRY(bind_args(args, {}, "first"));
  if (auto c = end_char(in, false)) return *c;
  SS_ASSIGN_OR_RETURN(auto items, iterate(in));
  if (items.empty()) return Value::undefined("No first item, sequence was empty.");
  return items.front();
}

Result<Value> f_last(const Value& in, const CallArgs& args) {
  SS_TRY(bind_args(args, {}, "last"));
  if (auto c = end_char(in, true)) return *c;
  SS_ASSIGN_OR_RETURN(auto items, iterate(in));
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Result<Value> f_list(const Value& in, const CallArgs& args) {
  SS_TRY(bind_args(args, {}, "list"));
  SS_ASSIGN_OR_RETURN(auto items, iterate(in));
  return Value::list(std::move(items));
}

Result<Value> f_items(const Value& in, const CallArgs& args) {
  SS_TRY(bind_args(args, {}, "items"));
  if (in.is_undefined()) return Value::list({});
  if (!in.is_dict()) return make_error("Can only get item pairs from a mapping.");
  return dict_item_list(in.as_dict());
}

Result<Value> f_join(const Value& in, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"d", "attribute"}, "join"));
  SS_ASSIGN_OR_RETURN(auto items, iterate(in));
  const Value sep = a[0].is_undefined() ? Value::string("") : to_marked_str(a[0]);
  MarkedText out;
  for (size_t i = 0; i < items.size(); ++i) {
    Value item = items[i];
    if (!a[1].is_undefined()) {
      SS_ASSIGN_OR_RETURN(item, get_attr_path(item, to_str(a[1])));
    }
    if (i > 0) out.append(sep);
    out.append(item);
    if (out.text.size() > kMaxBuiltinBytes)
      return errorf("join result exceeds {} bytes", kMaxBuiltinBytes);
  }
  return out.take();
}

Result<Value> f_reverse(const Value& in, const CallArgs& args) {
  SS_TRY(bind_args(args, {}, "reverse"));
  if (in.is_string()) {
    std::u32string s = decode_utf8(in.as_string());
    std::reverse(s.begin(), s.end());
    return derived_string(encode_utf8(s), {&in});
  }
  SS_ASSIGN_OR_RETURN(auto items, iterate(in));
  std::reverse(items.begin(), items.end());
  return Value::list(std::move(items));
}

// Sort/compare key: the attribute if asked, lowercased unless case-sensitive.
Result<Value> sort_key(const Value& item, const Value& attribute, bool case_sensitive) {
  Value key = item;
  if (!attribute.is_undefined() && !attribute.is_none()) {
    SS_ASSIGN_OR_RETURN(key, get_attr_path(item, to_str(attribute)));
  }
  if (!case_sensitive && key.is_string()) return Value::string(py_lower(key.as_string()));
  return key;
}

Result<std::vector<Value>> sorted_items(std::vector<Value> items, const Value& attribute,
                                        bool case_sensitive, bool reverse) {
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items) {
    SS_ASSIGN_OR_RETURN(Value key, sort_key(item, attribute, case_sensitive));
    keyed.emplace_back(std::move(key), std::move(item));
  }
  std::optional<Error> failure;
  std::stable_sort(keyed.begin(), keyed.end(), [&](const auto& x, const auto& y) {
    auto c = reverse ? compare_values(y.first, x.first) : compare_values(x.first, y.first);
    if (!c.ok()) {
      if (!failure) failure = c.error();
      return false;
    }
    return *c < 0;
  });
  if (failure) return *failure;
  std::vector<Value> out;
  for (auto& entry : keyed) out.push_back(std::move(entry.second));
  return out;
}

Result<Value> f_sort(const Value& in, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"reverse", "case_sensitive", "attribute"}, "sort"));
  SS_ASSIGN_OR_RETURN(auto items, iterate(in));
  SS_ASSIGN_OR_RETURN(auto sorted,
                      sorted_items(std::move(items), a[2], a[1].truthy(), a[0].truthy()));
  return Value::list(std::move(sorted));
}

Result<Value> f_dictsort(const Value& in, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"case_sensitive", "by", "reverse"}, "dictsort"));
  if (!in.is_dict()) return make_error("dictsort expects a mapping");
  const std::string by = a[1].is_undefined() ? "key" : to_str(a[1]);
  if (by != "key" && by != "value")
    return make_error("You can only sort by either 'key' or 'value'");
  // Items are (key, value) tuples, so the sort attribute is element 0 or 1.
  SS_ASSIGN_OR_RETURN(auto sorted, sorted_items(dict_item_list(in.as_dict()).as_list().items,
                                                Value::string(by == "key" ? "0" : "1"),
                                                a[0].truthy(), a[2].truthy()));
  return Value::list(std::move(sorted));
}

Result<Value> f_unique(const Value& in, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"case_sensitive", "attribute"}, "unique"));
  SS_ASSIGN_OR_RETURN(auto items, iterate(in));
  std::vector<Value> seen;
  std::vector<Value> out;
  for (const Value& item : items) {
    SS_ASSIGN_OR_RETURN(Value key, sort_key(item, a[1], a[0].truthy()));
    if (std::any_of(seen.begin(), seen.end(),
                    [&](const Value& s) { return values_equal(s, key); })) {
      continue;
    }
    seen.push_back(key);
    out.push_back(item);
  }
  return Value::list(std::move(out));
}

Result<Value> min_max(const Value& in, const CallArgs& args, bool want_max) {
  SS_ASSIGN_OR_RETURN(auto a,
                      bind_args(args, {"case_sensitive", "attribute"}, want_max ? "max" : "min"));
  SS_ASSIGN_OR_RETURN(auto items, iterate(in));
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  // Like Python's min/max: the first of equal extremes wins.
  size_t best = 0;
  SS_ASSIGN_OR_RETURN(Value best_key, sort_key(items[0], a[1], a[0].truthy()));
  for (size_t i = 1; i < items.size(); ++i) {
    SS_ASSIGN_OR_RETURN(Value key, sort_key(items[i], a[1], a[0].truthy()));
    SS_ASSIGN_OR_RETURN(int c, compare_values(key, best_key));
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Result<Value> f_max(const Value& in, const CallArgs& args) {
  return min_max(in, args, true);
}
Result<Value> f_min(const Value& in, const CallArgs& args) {
  return min_max(in, args, false);
}

Result<Value> f_sum(const Value& in, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"attribute", "start"}, "sum"));
  SS_ASSIGN_OR_RETURN(auto items, iterate(in));
  Value total = a[1].is_undefined() ? Value::integer(0) : a[1];
  for (Value item : items) {
    if (!a[0].is_undefined()) {
      SS_ASSIGN_OR_RETURN(item, get_attr_path(item, to_str(a[0])));
    }
    if (!total.is_number() || !item.is_number()) {
      return errorf("unsupported operand type(s) for +: '{}' and '{}'", total.type_name(),
                    item.type_name());
    }
    if (total.is_float() || item.is_float()) {
      total = Value::floating(total.as_double() + item.as_double());
    } else {
      int64_t sum = 0;
      if (__builtin_add_overflow(total.as_int(), item.as_int(), &sum))
        return make_error("integer overflow in sum");
      total = Value::integer(sum);
    }
  }
  return total;
}

Result<bool> apply_test(const Value& item, const std::string& name, const CallArgs& args) {
  const TestFn test = find_test(name);
  if (test == nullptr) return errorf("no test named '{}'", name);
  return test(item, args);
}

// select/reject/selectattr/rejectattr: keep items whose test result == keep.
Result<Value> select_impl(const Value& in, const CallArgs& args, bool by_attr, bool keep) {
  SS_ASSIGN_OR_RETURN(auto items, iterate(in));
  const size_t n_fixed = by_attr ? 2 : 1;
  if (by_attr && args.positional.empty())
    return make_error("selectattr/rejectattr need an attribute");
  const std::string attr = by_attr ? to_str(args.positional[0]) : "";
  const bool has_test = args.positional.size() >= n_fixed;
  const std::string test_name = has_test ? to_str(args.positional[n_fixed - 1]) : "";
  const CallArgs test_args = rest_of(args, n_fixed);
  std::vector<Value> out;
  for (const Value& item : items) {
    Value subject = item;
    if (by_attr) {
      SS_ASSIGN_OR_RETURN(subject, get_attr_path(item, attr));
    }
    bool passed = subject.truthy();
    if (has_test) {
      SS_ASSIGN_OR_RETURN(passed, apply_test(subject, test_name, test_args));
    }
    if (passed == keep) out.push_back(item);
  }
  return Value::list(std::move(out));
}

Result<Value> f_select(const Value& in, const CallArgs& a) {
  return select_impl(in, a, false, true);
}
Result<Value> f_reject(const Value& in, const CallArgs& a) {
  return select_impl(in, a, false, false);
}
Result<Value> f_selectattr(const Value& in, const CallArgs& a) {
  return select_impl(in, a, true, true);
}
Result<Value> f_rejectattr(const Value& in, const CallArgs& a) {
  return select_impl(in, a, true, false);
}

Result<Value> f_map(const Value& in, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto items, iterate(in));
  std::vector<Value> out;
  if (args.positional.empty()) {  // map(attribute='x', default=...)
    SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"attribute", "default"}, "map"));
    if (a[0].is_undefined()) return make_error("map() needs a filter name or attribute=");
    for (const Value& item : items) {
      SS_ASSIGN_OR_RETURN(Value v, get_attr_path(item, to_str(a[0])));
      out.push_back(v.is_undefined() && !a[1].is_undefined() ? a[1] : v);
    }
  } else {
    const std::string name = to_str(args.positional[0]);
    const FilterFn filter = find_filter(name);
    if (filter == nullptr) return errorf("no filter named '{}'", name);
    const CallArgs filter_args = rest_of(args, 1);
    for (const Value& item : items) {
      SS_ASSIGN_OR_RETURN(Value v, filter(item, filter_args));
      out.push_back(std::move(v));
    }
  }
  return Value::list(std::move(out));
}

struct NamedFilter {
  std::string_view name;
  FilterFn fn;
};

constexpr std::array<NamedFilter, 17> kSequenceFilters = {{
    {"dictsort", f_dictsort},
    {"first", f_first},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"list", f_list},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"reverse", f_reverse},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"sort", f_sort},
    {"sum", f_sum},
    {"unique", f_unique},
}};

}  // namespace

FilterFn find_sequence_filter(std::string_view name) {
  for (const NamedFilter& f : kSequenceFilters) {
    if (f.name == name) return f.fn;
  }
  return nullptr;
}

}  // namespace specstack::jinja
