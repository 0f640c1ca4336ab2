// Python semantics of the template operators on interpreter values:
// arithmetic with int overflow detection, str/list concatenation and
// repetition, comparisons (chained by the caller) and membership.
#pragma once

#include <cstddef>

#include "base/status.h"
#include "chat/jinja_ast.h"
#include "chat/jinja_value.h"

namespace specstack::jinja {

// kAnd/kOr are short-circuited by the interpreter and never reach here.
// Results longer than max_bytes (strings) or max_items (lists) are an Error,
// checked before anything is allocated.
Result<Value> binary_op(BinaryOp op, const Value& a, const Value& b, size_t max_bytes,
                        size_t max_items);
Result<Value> unary_op(UnaryOp op, const Value& a);
Result<bool> compare_op(CompareOp op, const Value& a, const Value& b);

}  // namespace specstack::jinja
