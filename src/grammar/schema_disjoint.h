// oneOf needs "exactly one branch matches". A grammar can only say "some
// branch matches" (anyOf), so a oneOf is compiled only when no document can
// match two of its branches, which this decides conservatively from what is
// cheap to see: the branches' JSON types, their const / enum values, or a
// required property whose const / enum values differ (a discriminated
// union, the common case). Anything else is reported as possibly
// overlapping and the compiler answers a 400 suggesting anyOf.
#pragma once

#include <nlohmann/json.hpp>

namespace specstack::grammar {

// True when no JSON document can validate against both schemas. `root`
// resolves local $refs (#, #/$defs/..., #/definitions/...). False means
// "maybe overlapping", not "certainly".
bool schemas_disjoint(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b,
                      const nlohmann::ordered_json& root);

}  // namespace specstack::grammar
