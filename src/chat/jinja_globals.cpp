// Global functions and Python-style argument binding.
#include <cmath>
#include <ctime>

#include "chat/jinja_builtins.h"
#include "chat/jinja_marked.h"
#include "chat/jinja_util.h"

namespace specstack::jinja {
namespace {

// jinja2's sandbox refuses larger ranges (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

Result<Value> range_fn(const CallArgs& args) {
  if (!args.keyword.empty()) return make_error("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) return errorf("range expected 1 to 3 arguments, got {}", p.size());
  for (const Value& v : p) {
    if (!v.is_int() && !v.is_bool()) return errorf("range() needs integers, not {}", v.type_name());
  }
  const int64_t start = p.size() == 1 ? 0 : p[0].as_int();
  const int64_t stop = p.size() == 1 ? p[0].as_int() : p[1].as_int();
  const int64_t step = p.size() == 3 ? p[2].as_int() : 1;
  if (step == 0) return make_error("range() arg 3 must not be zero");
  // Count without overflow: the span divided by the step, rounded up.
  const long double span = static_cast<long double>(stop) - static_cast<long double>(start);
  const long double count = span / static_cast<long double>(step);
  if (count > kMaxRange) {
    return errorf("range too big: the sandbox blocks ranges larger than {}", kMaxRange);
  }
  std::vector<Value> items;
  const auto n = count > 0 ? static_cast<int64_t>(std::ceil(count)) : int64_t{0};
  for (int64_t k = 0; k < n; ++k) items.push_back(Value::integer(start + k * step));
  return Value::list(std::move(items));
}

// Merges positional mappings and keyword arguments, later keys winning.
Result<DictData> collect_mapping(const CallArgs& args, std::string_view fn_name) {
  DictData out;
  auto put = [&out](const Value& key, const Value& value) {
    for (auto& entry : out.entries) {
      if (values_equal(entry.first, key)) {
        entry.second = value;
        return;
      }
    }
    out.entries.emplace_back(key, value);
  };
  if (args.positional.size() > 1)
    return errorf("{}() takes at most 1 positional argument", fn_name);
  for (const Value& arg : args.positional) {
    if (!arg.is_dict()) return errorf("{}() positional argument must be a dict", fn_name);
    for (const auto& [key, value] : arg.as_dict().entries) put(key, value);
  }
  for (const auto& [key, value] : args.keyword) put(Value::string(key), value);
  return out;
}

Result<Value> namespace_fn(const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(DictData attrs, collect_mapping(args, "namespace"));
  for (const auto& entry : attrs.entries) {
    if (!entry.first.is_string()) return make_error("namespace() attribute names must be strings");
    if (contains_namespace(entry.second)) return make_error("a namespace cannot hold a namespace");
  }
  return Value::make_namespace(std::move(attrs));
}

Result<Value> dict_fn(const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(DictData dict, collect_mapping(args, "dict"));
  return Value::dict(std::move(dict));
}

Result<Value> raise_exception_fn(const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"message"}, "raise_exception"));
  return make_error(to_str(a[0]));
}

// transformers: datetime.now().strftime(format), local time.
Result<Value> strftime_now_fn(const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"format"}, "strftime_now"));
  if (!a[0].is_string()) return make_error("strftime_now() format must be str");
  if (a[0].as_string().size() > 256) return make_error("strftime_now() format is too long");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string buffer(1024, '\0');
  const size_t n = std::strftime(buffer.data(), buffer.size(), a[0].as_string().c_str(), &local);
  buffer.resize(n);
  return derived_string(std::move(buffer), {&a[0]});
}

}  // namespace

Result<std::vector<Value>> bind_args(const CallArgs& args,
                                     std::initializer_list<std::string_view> params,
                                     std::string_view fn_name) {
  if (args.positional.size() > params.size()) {
    return errorf("{}() takes at most {} argument(s) ({} given)", fn_name, params.size(),
                  args.positional.size());
  }
  std::vector<Value> out(params.size());
  std::vector<bool> bound(params.size(), false);
  for (size_t i = 0; i < args.positional.size(); ++i) {
    out[i] = args.positional[i];
    bound[i] = true;
  }
  for (const auto& [name, value] : args.keyword) {
    size_t index = 0;
    for (std::string_view p : params) {
      if (p == name) break;
      ++index;
    }
    if (index == params.size()) {
      return errorf("{}() got an unexpected keyword argument '{}'", fn_name, name);
    }
    if (bound[index]) return errorf("{}() got multiple values for argument '{}'", fn_name, name);
    out[index] = value;
    bound[index] = true;
  }
  return out;
}

std::vector<std::pair<std::string, Value>> global_functions() {
  return {
      {"range", Value::function("range", range_fn)},
      {"namespace", Value::function("namespace", namespace_fn)},
      {"dict", Value::function("dict", dict_fn)},
      {"raise_exception", Value::function("raise_exception", raise_exception_fn, true)},
      {"strftime_now", Value::function("strftime_now", strftime_now_fn)},
  };
}

}  // namespace specstack::jinja
