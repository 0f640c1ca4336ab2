// jinja2's builtin tests (`x is defined`, `x is string`, ...).
#include <array>
#include <cmath>

#include "chat/jinja_builtins.h"
#include "chat/py_string.h"

namespace specstack::jinja {
namespace {

// Most tests take no argument; a stray one is a template error.
Status no_args(const CallArgs& args, std::string_view name) {
  return bind_args(args, {}, name).ok() ? Status() : errorf("test '{}' takes no arguments", name);
}

Result<Value> one_arg(const CallArgs& args, std::string_view name) {
  SS_ASSIGN_OR_RETURN(auto a, bind_args(args, {"other"}, name));
  return a[0];
}

#define SS_SIMPLE_TEST(fn_name, test_name, expr)               \
  Result<bool> fn_name(const Value& v, const CallArgs& args) { \
    SS_TRY(no_args(args, test_name));                          \
    return (expr);                                             \
  }

SS_SIMPLE_TEST(t_defined, "defined", !v.is_undefined())
SS_SIMPLE_TEST(t_undefined, "undefined", v.is_undefined())
SS_SIMPLE_TEST(t_none, "none", v.is_none())
SS_SIMPLE_TEST(t_boolean, "boolean", v.is_bool())
SS_SIMPLE_TEST(t_true, "true", v.is_bool() && v.as_bool())
SS_SIMPLE_TEST(t_false, "false", v.is_bool() && !v.as_bool())
SS_SIMPLE_TEST(t_string, "string", v.is_string())
SS_SIMPLE_TEST(t_number, "number", v.is_number())
SS_SIMPLE_TEST(t_integer, "integer", v.is_int())
SS_SIMPLE_TEST(t_float, "float", v.is_float())
SS_SIMPLE_TEST(t_mapping, "mapping", v.is_dict())
SS_SIMPLE_TEST(t_callable, "callable", v.is_function())
// jinja2's Undefined has __len__, __getitem__ and __iter__, so it counts as both.
SS_SIMPLE_TEST(t_sequence, "sequence",
               v.is_string() || v.is_list() || v.is_dict() || v.is_undefined())
SS_SIMPLE_TEST(t_iterable, "iterable",
               v.is_string() || v.is_list() || v.is_dict() || v.is_undefined())
SS_SIMPLE_TEST(t_lower, "lower", py_islower(to_str(v)))
SS_SIMPLE_TEST(t_upper, "upper", py_isupper(to_str(v)))
SS_SIMPLE_TEST(t_escaped, "escaped", false)
SS_SIMPLE_TEST(t_filter, "filter", v.is_string() && find_filter(v.as_string()) != nullptr)
SS_SIMPLE_TEST(t_test, "test", v.is_string() && find_test(v.as_string()) != nullptr)

#undef SS_SIMPLE_TEST

Result<bool> parity(const Value& v, const CallArgs& args, bool want_odd) {
  SS_TRY(no_args(args, want_odd ? "odd" : "even"));
  // Python: odd is `value % 2 == 1`, even is `value % 2 == 0` (floats too).
  if (v.is_float()) {
    double m = std::fmod(v.as_double(), 2.0);
    if (m < 0) m += 2.0;
    return m == (want_odd ? 1.0 : 0.0);
  }
  if (!v.is_int() && !v.is_bool())
    return errorf("unsupported operand type for %: '{}'", v.type_name());
  return ((v.as_int() % 2) != 0) == want_odd;
}

Result<bool> t_odd(const Value& v, const CallArgs& args) {
  return parity(v, args, true);
}
Result<bool> t_even(const Value& v, const CallArgs& args) {
  return parity(v, args, false);
}

Result<bool> t_divisibleby(const Value& v, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(Value n, one_arg(args, "divisibleby"));
  if (!v.is_number() || !n.is_number()) return make_error("divisibleby needs numbers");
  if (v.is_float() || n.is_float()) {
    if (n.as_double() == 0.0) return make_error("float modulo by zero");
    return std::fmod(v.as_double(), n.as_double()) == 0.0;
  }
  if (n.as_int() == 0) return make_error("integer modulo by zero");
  if (n.as_int() == -1) return true;
  return v.as_int() % n.as_int() == 0;
}

Result<bool> t_eq(const Value& v, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(Value other, one_arg(args, "eq"));
  return values_equal(v, other);
}

Result<bool> t_ne(const Value& v, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(Value other, one_arg(args, "ne"));
  return !values_equal(v, other);
}

template <int kSign, bool kOrEqual>
Result<bool> t_order(const Value& v, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(Value other, one_arg(args, "comparison"));
  SS_ASSIGN_OR_RETURN(int c, compare_values(v, other));
  return c == kSign || (kOrEqual && c == 0);
}

Result<bool> t_in(const Value& v, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(Value seq, one_arg(args, "in"));
  return contains(seq, v);
}

Result<bool> t_sameas(const Value& v, const CallArgs& args) {
  SS_ASSIGN_OR_RETURN(Value other, one_arg(args, "sameas"));
  if (v.kind() != other.kind()) return false;
  if (v.identity() != nullptr) return v.identity() == other.identity();
  return values_equal(v, other);
}

struct NamedTest {
  std::string_view name;
  TestFn fn;
};

constexpr std::array<NamedTest, 39> kTests = {{
    {"boolean", t_boolean},
    {"callable", t_callable},
    {"defined", t_defined},
    {"divisibleby", t_divisibleby},
    {"eq", t_eq},
    {"equalto", t_eq},
    {"==", t_eq},
    {"escaped", t_escaped},
    {"even", t_even},
    {"false", t_false},
    {"filter", t_filter},
    {"float", t_float},
    {"ge", t_order<1, true>},
    {">=", t_order<1, true>},
    {"gt", t_order<1, false>},
    {"greaterthan", t_order<1, false>},
    {">", t_order<1, false>},
    {"in", t_in},
    {"integer", t_integer},
    {"iterable", t_iterable},
    {"le", t_order<-1, true>},
    {"<=", t_order<-1, true>},
    {"lower", t_lower},
    {"lt", t_order<-1, false>},
    {"lessthan", t_order<-1, false>},
    {"<", t_order<-1, false>},
    {"mapping", t_mapping},
    {"ne", t_ne},
    {"!=", t_ne},
    {"none", t_none},
    {"number", t_number},
    {"odd", t_odd},
    {"sameas", t_sameas},
    {"sequence", t_sequence},
    {"string", t_string},
    {"test", t_test},
    {"true", t_true},
    {"undefined", t_undefined},
    {"upper", t_upper},
}};

}  // namespace

TestFn find_test(std::string_view name) {
  for (const NamedTest& t : kTests) {
    if (t.name == name) return t.fn;
  }
  return nullptr;
}

}  // namespace specstack::jinja
