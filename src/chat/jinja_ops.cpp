#include "chat/jinja_ops.h"

#include <cmath>

#include "chat/jinja_marked.h"
#include "chat/jinja_util.h"

namespace specstack::jinja {
namespace {

const char* op_symbol(BinaryOp op) {
  switch (op) {
    case BinaryOp::kAdd:
      return "+";
    case BinaryOp::kSub:
      return "-";
    case BinaryOp::kMul:
      return "*";
    case BinaryOp::kDiv:
      return "/";
    case BinaryOp::kFloorDiv:
      return "//";
    case BinaryOp::kMod:
      return "%";
    case BinaryOp::kPow:
      return "**";
    case BinaryOp::kConcat:
      return "~";
    case BinaryOp::kAnd:
      return "and";
    case BinaryOp::kOr:
      return "or";
  }
  return "?";
}

Error unsupported(BinaryOp op, const Value& a, const Value& b) {
  if (op == BinaryOp::kAdd && (a.is_string() || a.is_list())) {
    return errorf("can only concatenate {} (not \"{}\") to {}", a.type_name(), b.type_name(),
                  a.type_name());
  }
  return errorf("unsupported operand type(s) for {}: '{}' and '{}'", op_symbol(op), a.type_name(),
                b.type_name());
}

bool integral(const Value& v) {
  return v.is_int() || v.is_bool();
}

Result<Value> int_arith(BinaryOp op, int64_t x, int64_t y) {
  int64_t r = 0;
  switch (op) {
    case BinaryOp::kAdd:
      if (__builtin_add_overflow(x, y, &r)) break;
      return Value::integer(r);
    case BinaryOp::kSub:
      if (__builtin_sub_overflow(x, y, &r)) break;
      return Value::integer(r);
    case BinaryOp::kMul:
      if (__builtin_mul_overflow(x, y, &r)) break;
      return Value::integer(r);
    case BinaryOp::kDiv:
      if (y == 0) return make_error("division by zero");
      return Value::floating(static_cast<double>(x) / static_cast<double>(y));
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (y == 0) return make_error("integer division or modulo by zero");
      if (x == INT64_MIN && y == -1) break;
      int64_t q = x / y;
      int64_t m = x % y;
      if (m != 0 && ((m < 0) != (y < 0))) {  // Python floors toward -infinity
        --q;
        m += y;
      }
      return Value::integer(op == BinaryOp::kFloorDiv ? q : m);
    }
    case BinaryOp::kPow: {
      if (y < 0) {
        if (x == 0) return make_error("0.0 cannot be raised to a negative power");
        return Value::floating(std::pow(static_cast<double>(x), static_cast<double>(y)));
      }
      int64_t result = 1;
      int64_t base = x;
      for (int64_t e = y; e > 0; e >>= 1) {
        if ((e & 1) && __builtin_mul_overflow(result, base, &result)) {
          return make_error("integer overflow in '**'");
        }
        if (e > 1 && __builtin_mul_overflow(base, base, &base)) {
          return make_error("integer overflow in '**'");
        }
      }
      return Value::integer(result);
    }
    default:
      break;
  }
  return errorf("integer overflow in '{}'", op_symbol(op));
}

Result<Value> float_arith(BinaryOp op, double x, double y) {
  switch (op) {
    case BinaryOp::kAdd:
      return Value::floating(x + y);
    case BinaryOp::kSub:
      return Value::floating(x - y);
    case BinaryOp::kMul:
      return Value::floating(x * y);
    case BinaryOp::kDiv:
      if (y == 0.0) return make_error("float division by zero");
      return Value::floating(x / y);
    case BinaryOp::kFloorDiv:
    case BinaryOp::kMod: {
      if (y == 0.0) return make_error("float modulo by zero");
      // CPython's float_divmod.
      double mod = std::fmod(x, y);
      double div = (x - mod) / y;
      if (mod != 0.0) {
        if ((y < 0) != (mod < 0)) {
          mod += y;
          div -= 1.0;
        }
      } else {
        mod = std::copysign(0.0, y);
      }
      double floordiv = 0.0;
      if (div != 0.0) {
        floordiv = std::floor(div);
        if (div - floordiv > 0.5) floordiv += 1.0;
      } else {
        floordiv = std::copysign(0.0, x / y);
      }
      return Value::floating(op == BinaryOp::kFloorDiv ? floordiv : mod);
    }
    case BinaryOp::kPow:
      if (x == 0.0 && y < 0) return make_error("0.0 cannot be raised to a negative power");
      return Value::floating(std::pow(x, y));
    default:
      return errorf("unsupported float operator '{}'", op_symbol(op));
  }
}

Result<Value> repeat(const Value& seq, int64_t n, size_t max_bytes, size_t max_items) {
  const uint64_t count = n > 0 ? static_cast<uint64_t>(n) : 0;
  if (seq.is_string()) {
    const size_t unit = seq.as_string().size();
    if (unit != 0 && count > max_bytes / unit)
      return errorf("string repetition exceeds {} bytes", max_bytes);
    MarkedText out;  // repetition is concatenation: each copy keeps its ranges
    out.text.reserve(unit * count);
    for (uint64_t i = 0; i < count; ++i) out.append(seq.as_string(), seq.user_ranges());
    return out.take();
  }
  const auto& items = seq.as_list().items;
  if (!items.empty() && count > max_items / items.size()) {
    return errorf("list repetition exceeds {} items", max_items);
  }
  std::vector<Value> out;
  out.reserve(items.size() * count);
  for (uint64_t i = 0; i < count; ++i) out.insert(out.end(), items.begin(), items.end());
  return Value::list(std::move(out), seq.as_list().is_tuple);
}

}  // namespace

Result<Value> binary_op(BinaryOp op, const Value& a, const Value& b, size_t max_bytes,
                        size_t max_items) {
  if (op == BinaryOp::kConcat) {
    const Value left = to_marked_str(a);
    const Value right = to_marked_str(b);
    if (left.as_string().size() + right.as_string().size() > max_bytes) {
      return errorf("string exceeds {} bytes", max_bytes);
    }
    MarkedText out;
    out.append(left);
    out.append(right);
    return out.take();
  }
  // jinja2's Undefined raises on every arithmetic operator.
  if (a.is_undefined()) return make_error(undefined_message(a));
  if (b.is_undefined()) return make_error(undefined_message(b));
  if (a.is_number() && b.is_number()) {
    if (integral(a) && integral(b)) return int_arith(op, a.as_int(), b.as_int());
    return float_arith(op, a.as_double(), b.as_double());
  }
  if (op == BinaryOp::kAdd && a.is_string() && b.is_string()) {
    if (a.as_string().size() + b.as_string().size() > max_bytes) {
      return errorf("string exceeds {} bytes", max_bytes);
    }
    MarkedText out;
    out.append(a);
    out.append(b);
    return out.take();
  }
  if (op == BinaryOp::kAdd && a.is_list() && b.is_list() &&
      a.as_list().is_tuple == b.as_list().is_tuple) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    if (x.size() + y.size() > max_items) return errorf("list exceeds {} items", max_items);
    std::vector<Value> out;
    out.reserve(x.size() + y.size());
    out.insert(out.end(), x.begin(), x.end());
    out.insert(out.end(), y.begin(), y.end());
    return Value::list(std::move(out), a.as_list().is_tuple);
  }
  if (op == BinaryOp::kMul) {
    if ((a.is_string() || a.is_list()) && integral(b))
      return repeat(a, b.as_int(), max_bytes, max_items);
    if (integral(a) && (b.is_string() || b.is_list()))
      return repeat(b, a.as_int(), max_bytes, max_items);
  }
  if (op == BinaryOp::kMod && a.is_string()) {
    return make_error("printf-style string formatting ('%') is not supported");
  }
  return unsupported(op, a, b);
}

Result<Value> unary_op(UnaryOp op, const Value& a) {
  if (op == UnaryOp::kNot) return Value::boolean(!a.truthy());
  if (a.is_undefined()) return make_error(undefined_message(a));
  if (a.is_float()) return Value::floating(op == UnaryOp::kNeg ? -a.as_double() : a.as_double());
  if (!integral(a)) {
    return errorf("bad operand type for unary {}: '{}'", op == UnaryOp::kNeg ? "-" : "+",
                  a.type_name());
  }
  if (op == UnaryOp::kPos) return Value::integer(a.as_int());
  if (a.as_int() == INT64_MIN) return make_error("integer overflow in unary '-'");
  return Value::integer(-a.as_int());
}

Result<bool> compare_op(CompareOp op, const Value& a, const Value& b) {
  switch (op) {
    case CompareOp::kEq:
      return values_equal(a, b);
    case CompareOp::kNe:
      return !values_equal(a, b);
    case CompareOp::kIn:
      return contains(b, a);
    case CompareOp::kNotIn: {
      SS_ASSIGN_OR_RETURN(bool found, contains(b, a));
      return !found;
    }
    default:
      break;
  }
  if (a.is_undefined()) return make_error(undefined_message(a));
  if (b.is_undefined()) return make_error(undefined_message(b));
  const char* symbol = op == CompareOp::kLt   ? "<"
                       : op == CompareOp::kLe ? "<="
                       : op == CompareOp::kGt ? ">"
                                              : ">=";
  auto c = compare_values(a, b);
  if (!c.ok()) {
    return errorf("'{}' not supported between instances of '{}' and '{}'", symbol, a.type_name(),
                  b.type_name());
  }
  switch (op) {
    case CompareOp::kLt:
      return *c < 0;
    case CompareOp::kLe:
      return *c <= 0;
    case CompareOp::kGt:
      return *c > 0;
    default:
      return *c >= 0;
  }
}

}  // namespace specstack::jinja
