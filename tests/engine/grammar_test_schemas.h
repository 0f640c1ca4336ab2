// JSON schemas the grammar engine tests (CPU: grammar_engine_test, GPU:
// grammar_cuda_test) generate against: nested objects, arrays with bounds,
// anyOf with formats, patterns. The GPU test runs the first kGpuSchemas.
#pragma once

#include <cstddef>

namespace specstack::testing {

inline constexpr const char* kGrammarTestSchemas[] = {
    R"({"type":"object","properties":{"name":{"type":"string","maxLength":8},
        "age":{"type":"integer"},"ok":{"type":"boolean"},
        "tags":{"type":"array","items":{"enum":["red","green","blue"]},"maxItems":3}},
        "required":["name","age"]})",
    R"({"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},
        "kind":{"enum":["a","b"]},"score":{"type":"number"}},"required":["id","kind"]},
        "minItems":1,"maxItems":3})",
    R"({"anyOf":[{"type":"string","maxLength":5},{"type":"null"},{"type":"integer"},
        {"type":"object","properties":{"when":{"type":"string","format":"date"}},"required":["when"]}]})",
    R"({"type":"object","properties":{"code":{"type":"string","pattern":"^[A-Z]{2}-[0-9]{2,4}$"},
        "v":{"type":["boolean","null"]},"id":{"type":"string","format":"uuid"}},"required":["code"]})",
};
inline constexpr size_t kGpuGrammarTestSchemas = 3;

}  // namespace specstack::testing
