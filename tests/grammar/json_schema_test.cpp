#include "grammar/json_schema.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <optional>

#include "grammar/gbnf_parser.h"
#include "grammar/json_generator.h"
#include "grammar/matcher.h"
#include "grammar/schema_check.h"

namespace specstack::grammar {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const Grammar> compile(const Json& schema) {
  auto text = json_schema_to_gbnf(schema);
  EXPECT_TRUE(text.ok()) << (text.ok() ? "" : text.message());
  if (!text.ok()) return nullptr;
  auto g = parse_gbnf(*text);
  EXPECT_TRUE(g.ok()) << (g.ok() ? "" : g.message()) << "\n" << *text;
  if (!g.ok()) return nullptr;
  return std::make_shared<const Grammar>(std::move(g).value());
}

bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

std::string error_of(const Json& schema) {
  auto text = json_schema_to_gbnf(schema);
  return text.ok() ? "" : text.message();
}

TEST(JsonSchema, Primitives) {
  auto s = compile(Json::parse(R"({"type":"string"})"));
  EXPECT_TRUE(matches(s, R"("a\"b\\c\u00e9 €")"));
  EXPECT_FALSE(matches(s, "\"a\nb\""));  // a raw control character
  EXPECT_FALSE(matches(s, R"("a)"));
  auto n = compile(Json::parse(R"({"type":"number"})"));
  for (const char* ok : {"0", "-1.5", "3e10", "12.25E-3", "-0"}) EXPECT_TRUE(matches(n, ok)) << ok;
  for (const char* bad : {"01", "1.", ".5", "+1", "1e"}) EXPECT_FALSE(matches(n, bad)) << bad;
  auto i = compile(Json::parse(R"({"type":"integer"})"));
  EXPECT_TRUE(matches(i, "-42"));
  EXPECT_FALSE(matches(i, "4.2"));
  auto b = compile(Json::parse(R"({"type":["boolean","null"]})"));
  EXPECT_TRUE(matches(b, "true"));
  EXPECT_TRUE(matches(b, "null"));
  EXPECT_FALSE(matches(b, "1"));
}

TEST(JsonSchema, ObjectsAreStrictAndOrdered) {
  auto g = compile(Json::parse(R"({"type":"object","properties":{
      "a":{"type":"integer"},"b":{"type":"string"},"c":{"type":"boolean"}},
      "required":["a","c"]})"));
  EXPECT_TRUE(matches(g, R"({"a":1,"c":true})"));
  EXPECT_TRUE(matches(g, R"({"a":1,"b":"x","c":false})"));
  EXPECT_TRUE(matches(g, "{\n  \"a\": 1,\n  \"b\": \"x\",\n  \"c\": false\n}"));
  EXPECT_FALSE(matches(g, R"({"a":1})"));                 // c required
  EXPECT_FALSE(matches(g, R"({"a":1,"c":true,"d":1})"));  // additionalProperties false
  EXPECT_FALSE(matches(g, R"({"c":true,"a":1})"));        // declared order
  EXPECT_FALSE(matches(g, R"({"a":1,,"c":true})"));
  // Whitespace is bounded: one newline plus at most 20 columns.
  EXPECT_FALSE(matches(g, "{\n\n\"a\":1,\"c\":true}"));
  EXPECT_FALSE(matches(g, "{" + std::string(21, ' ') + "\"a\":1,\"c\":true}"));
}

TEST(JsonSchema, OptionalOnlyAndAdditionalProperties) {
  auto g = compile(Json::parse(R"({"properties":{"x":{"type":"null"},"y":{"type":"null"}}})"));
  for (const char* ok : {"{}", R"({"x":null})", R"({"y":null})", R"({"x":null,"y":null})"})
    EXPECT_TRUE(matches(g, ok)) << ok;
  EXPECT_FALSE(matches(g, R"({,"y":null})"));
  auto extra = compile(Json::parse(
      R"({"type":"object","properties":{"x":{"type":"null"}},"additionalProperties":{"type":"integer"}})"));
  EXPECT_TRUE(matches(extra, R"({"x":null,"k":1,"j":2})"));
  EXPECT_TRUE(matches(extra, R"({"k":1})"));
  EXPECT_FALSE(matches(extra, R"({"k":"s"})"));
  auto any = compile(Json::parse(R"({"type":"object"})"));
  EXPECT_TRUE(matches(any, R"({"q":[1,{"r":null}]})"));
}

TEST(JsonSchema, EnumConstArrays) {
  auto e = compile(Json::parse(R"({"enum":["red",1,null,{"a":"b"}]})"));
  for (const char* ok : {R"("red")", "1", "null", R"({"a":"b"})"}) EXPECT_TRUE(matches(e, ok));
  EXPECT_FALSE(matches(e, R"("blue")"));
  auto c = compile(Json::parse(R"({"const":"only"})"));
  EXPECT_TRUE(matches(c, R"("only")"));
  EXPECT_FALSE(matches(c, R"("other")"));
  auto a = compile(
      Json::parse(R"({"type":"array","items":{"type":"integer"},"minItems":2,"maxItems":3})"));
  EXPECT_FALSE(matches(a, "[1]"));
  EXPECT_TRUE(matches(a, "[1, 2]"));
  EXPECT_TRUE(matches(a, "[1,2,3]"));
  EXPECT_FALSE(matches(a, "[1,2,3,4]"));
  EXPECT_FALSE(matches(a, "[1,\"x\"]"));
  auto empty = compile(Json::parse(R"({"type":"array","maxItems":0})"));
  EXPECT_TRUE(matches(empty, "[]"));
  EXPECT_FALSE(matches(empty, "[1]"));
}

TEST(JsonSchema, StringsLengthFormatPattern) {
  auto l = compile(Json::parse(R"({"type":"string","minLength":2,"maxLength":3})"));
  EXPECT_FALSE(matches(l, R"("a")"));
  EXPECT_TRUE(matches(l, R"("é€")"));  // code points, not bytes
  EXPECT_TRUE(matches(l, R"("a\nb")"));
  EXPECT_FALSE(matches(l, R"("abcd")"));
  auto d = compile(Json::parse(R"({"type":"string","format":"date"})"));
  EXPECT_TRUE(matches(d, R"("2024-02-29")"));
  EXPECT_FALSE(matches(d, R"("2024-13-01")"));
  auto dt = compile(Json::parse(R"({"type":"string","format":"date-time"})"));
  EXPECT_TRUE(matches(dt, R"("2024-02-29T23:59:01.5+05:30")"));
  EXPECT_FALSE(matches(dt, R"("2024-02-29 23:59:01Z")"));
  auto u = compile(Json::parse(R"({"type":"string","format":"uuid"})"));
  EXPECT_TRUE(matches(u, R"("3fa85f64-5717-4562-b3fc-2c963f66afa6")"));
  EXPECT_FALSE(matches(u, R"("3fa85f64-5717-4562-b3fc-2c963f66afa")"));
  auto p =
      compile(Json::parse(R"({"type":"string","pattern":"^[A-Z]{2}-\\d{3,4}(x|yz)?[^a-c]$"})"));
  EXPECT_TRUE(matches(p, R"("AB-123d")"));
  EXPECT_TRUE(matches(p, R"("AB-1234yz!")"));
  EXPECT_FALSE(matches(p, R"("AB-123a")"));
  EXPECT_FALSE(matches(p, R"("AB-12d")"));
  // A negated class never admits a bare quote; a literal quote is escaped.
  auto q = compile(Json::parse(R"({"type":"string","pattern":"^\"[^x]$"})"));
  EXPECT_TRUE(matches(q, R"("\"y")"));
  EXPECT_FALSE(matches(q, R"("\"x")"));
  EXPECT_FALSE(matches(q, R"(""")"));
}

// Long minimums compile to one counted element (grammar.h), not one grammar
// position per character or item, and still count exactly.
TEST(JsonSchema, LongMinimumsAreCounted) {
  auto s = compile(Json::parse(R"({"type":"string","minLength":1000})"));
  ASSERT_NE(s, nullptr);
  // The primitives' rules are ~280 elements; unrolled, 1000 more.
  EXPECT_LT(s->elements.size(), 400u);
  const std::string chars999(999, 'x');
  EXPECT_FALSE(matches(s, "\"" + chars999 + "\""));
  EXPECT_TRUE(matches(s, "\"" + chars999 + "y\""));
  EXPECT_TRUE(matches(s, "\"" + chars999 + "\\u00e9\""));  // an escape is one character
  EXPECT_TRUE(matches(s, "\"" + chars999 + "xxxxx\""));
  std::string accents;
  for (int i = 0; i < 999; ++i) accents += "\xc3\xa9";  // é: two bytes, one code point
  EXPECT_FALSE(matches(s, "\"" + accents + "\""));
  EXPECT_TRUE(matches(s, "\"" + accents + "\xc3\xa9\""));
  auto b = compile(Json::parse(R"({"type":"string","minLength":10,"maxLength":12})"));
  EXPECT_FALSE(matches(b, R"("123456789")"));
  EXPECT_TRUE(matches(b, R"("1234567890")"));
  EXPECT_TRUE(matches(b, R"("123456789012")"));
  EXPECT_FALSE(matches(b, R"("1234567890123")"));
  auto a = compile(
      Json::parse(R"({"type":"array","items":{"type":"integer"},"minItems":8,"maxItems":9})"));
  ASSERT_NE(a, nullptr);
  EXPECT_FALSE(matches(a, "[1,2,3,4,5,6,7]"));
  EXPECT_TRUE(matches(a, "[1,2,3,4,5,6,7,8]"));
  EXPECT_TRUE(matches(a, "[1, 2, 3, 4, 5, 6, 7, 8, 9]"));
  EXPECT_FALSE(matches(a, "[1,2,3,4,5,6,7,8,9,10]"));
  auto many = compile(Json::parse(R"({"type":"array","items":{"type":"string"},"minItems":500})"));
  ASSERT_NE(many, nullptr);
  EXPECT_LT(many->elements.size(), 400u);
  std::string items = "[\"\"";
  for (int i = 1; i < 499; ++i) items += ",\"a\"";
  EXPECT_FALSE(matches(many, items + "]"));
  EXPECT_TRUE(matches(many, items + ",\"b\"]"));
  EXPECT_TRUE(matches(many, items + ",\"b\",\"c\"]"));
}

TEST(JsonSchema, AnyOfRefsAndRecursion) {
  auto g = compile(Json::parse(R"({
    "$defs": {"node": {"type":"object","properties":{
        "v":{"type":"integer"},
        "kids":{"type":"array","items":{"$ref":"#/$defs/node"}}},"required":["v"]}},
    "anyOf": [{"$ref":"#/$defs/node"}, {"type":"string","maxLength":1}]})"));
  EXPECT_TRUE(matches(g, R"({"v":1,"kids":[{"v":2},{"v":3,"kids":[{"v":4}]}]})"));
  EXPECT_TRUE(matches(g, R"("x")"));
  EXPECT_FALSE(matches(g, R"({"v":1,"kids":[{"w":2}]})"));
  auto self = compile(Json::parse(
      R"({"type":"object","properties":{"next":{"anyOf":[{"type":"null"},{"$ref":"#"}]}},"required":["next"]})"));
  EXPECT_TRUE(matches(self, R"({"next":{"next":{"next":null}}})"));
}

TEST(JsonSchema, UnsupportedKeywordsAreNamed) {
  EXPECT_NE(error_of(Json::parse(R"({"type":"number","minimum":3.5})")).find("whole numbers"),
            std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"({"type":"number","multipleOf":2})")).find("'multipleOf'"),
            std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"({"minimum":3})")).find("needs \"type\": \"integer\""),
            std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"({"type":"integer","multipleOf":3})")).find("'multipleOf'"),
            std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"({"allOf":[{"type":"integer"}]})")).find("'allOf'"),
            std::string::npos);
  const std::string nested = error_of(
      Json::parse(R"({"type":"object","properties":{"a":{"type":"array","uniqueItems":true}}})"));
  EXPECT_NE(nested.find("'uniqueItems' at '#/properties/a'"), std::string::npos) << nested;
  EXPECT_NE(error_of(Json::parse(R"({"type":"string","format":"email"})")).find("format"),
            std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"({"type":"string","pattern":"abc"})")).find("anchored"),
            std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"({"type":"string","pattern":"^(?=a)$"})")).find("lookaround"),
            std::string::npos);
  // Found by the json_schema fuzz target: "{}" passed through as GBNF.
  EXPECT_NE(error_of(Json::parse(R"({"type":"string","pattern":"^a{}$"})")).find("bad repetition"),
            std::string::npos);
  EXPECT_NE(
      error_of(Json::parse(R"({"type":"string","pattern":"^a{3,2}$"})")).find("bad repetition"),
      std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"({"$ref":"#/$defs/missing"})")).find("not defined"),
            std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"({"$ref":"http://x/y"})")).find("$ref"), std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"({"type":"frog"})")).find("unknown type 'frog'"),
            std::string::npos);
  EXPECT_NE(
      error_of(Json::parse(R"({"type":"object","properties":{},"required":["z"]})")).find("'z'"),
      std::string::npos);
  EXPECT_NE(error_of(Json::parse("[1]")).find("must be an object"), std::string::npos);
}

// Every generated document of a schema matches its grammar, and the
// validator (independent of the compiler) agrees with the generator.
TEST(JsonSchema, GeneratedDocumentsMatch) {
  const Json schema = Json::parse(R"({"type":"object","properties":{
      "id":{"type":"string","format":"uuid"},"n":{"type":"number"},
      "tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":3},
      "when":{"type":"string","format":"date-time"},
      "any":{},"nested":{"type":"object","properties":{"k":{"type":["string","null"]}}}},
      "required":["id","n"]})");
  auto g = compile(schema);
  testing::JsonGenerator gen(schema, 5);
  for (int i = 0; i < 300; ++i) {
    const Json doc = gen.generate();
    std::string why;
    ASSERT_TRUE(testing::schema_valid(doc, schema, schema, &why)) << why;
    const std::string text = gen.serialize(doc);
    EXPECT_TRUE(matches(g, text)) << text;
  }
}

// Nothing after the root value: the document ends at its last byte (the
// random-weight model used to pad the end with the whitespace allowed there).
TEST(JsonSchema, NoWhitespaceAroundTheRootValue) {
  for (const char* schema : {R"({"type":"object","properties":{"a":{"type":"integer"}}})",
                             R"({"type":"array"})", R"({"type":"string"})", R"({"enum":[1,2]})",
                             R"({"type":"integer","minimum":1,"maximum":5})"}) {
    auto g = compile(Json::parse(schema));
    const std::string doc = std::string(schema).find("array") != std::string::npos    ? "[1]"
                            : std::string(schema).find("string") != std::string::npos ? "\"x\""
                            : std::string(schema).find("object") != std::string::npos ? "{\"a\":1}"
                                                                                      : "1";
    EXPECT_TRUE(matches(g, doc)) << schema;
    EXPECT_FALSE(matches(g, doc + " ")) << schema;
    EXPECT_FALSE(matches(g, doc + "\n")) << schema;
    EXPECT_FALSE(matches(g, " " + doc)) << schema;
    GrammarMatcher m(g);
    ASSERT_TRUE(m.accept_bytes(doc));
    EXPECT_TRUE(m.next_bytes().none()) << schema << ": something may follow the root";
  }
  auto o = std::make_shared<const Grammar>(parse_gbnf(json_object_gbnf()).value());
  EXPECT_FALSE(matches(o, "{} "));
  EXPECT_TRUE(matches(o, "{ \"a\" : [ 1 , 2 ] }"));  // inside, whitespace is as before
}

// Bounded integers: exactly the integers in range, for every bound kind.
TEST(JsonSchema, IntegerBounds) {
  struct Case {
    const char* schema;
    int64_t lo, hi;  // the admitted range, checked over [-1100, 1100]
  };
  for (const Case& c : {Case{R"({"type":"integer","minimum":-12,"maximum":305})", -12, 305},
                        Case{R"({"type":"integer","exclusiveMinimum":0,"maximum":9})", 1, 9},
                        Case{R"({"type":"integer","minimum":7.5,"exclusiveMaximum":100})", 8, 99},
                        Case{R"({"type":"integer","minimum":-999,"maximum":-10})", -999, -10},
                        Case{R"({"type":"integer","minimum":0,"maximum":0})", 0, 0},
                        Case{R"({"type":"integer","minimum":95})", 95, 1100},
                        Case{R"({"type":"integer","maximum":-3})", -1100, -3}}) {
    auto g = compile(Json::parse(c.schema));
    for (int64_t v = -1100; v <= 1100; ++v) {
      EXPECT_EQ(matches(g, std::to_string(v)), v >= c.lo && v <= c.hi) << c.schema << " " << v;
    }
    EXPECT_FALSE(matches(g, "-0")) << c.schema;
    EXPECT_FALSE(matches(g, "007")) << c.schema;
  }
  auto open_low = compile(Json::parse(R"({"type":"integer","minimum":95})"));
  EXPECT_TRUE(matches(open_low, "9999999999999999"));    // 16 digits: the number limit
  EXPECT_FALSE(matches(open_low, "99999999999999999"));  // 17
  EXPECT_NE(error_of(Json::parse(R"({"type":"integer","minimum":5,"maximum":4})")).find("no value"),
            std::string::npos);
  EXPECT_NE(error_of(Json::parse(R"({"type":"integer","minimum":"5"})")).find("'minimum'"),
            std::string::npos);
}

// Whole-number bounds on numbers: over every sign, integer part 0-12 and a
// set of fractions, the grammar admits exactly the values in range (a "-0"
// spelling of zero is left out of the comparison: the grammar admits it only
// where negative numbers are in range). Exponents are never admitted.
TEST(JsonSchema, NumberBounds) {
  struct Case {
    const char* schema;
    std::optional<double> lo, hi;
    bool lo_exclusive = false, hi_exclusive = false;
  };
  const Case cases[] = {
      {R"({"type":"number","minimum":-2,"maximum":3})", -2, 3},
      {R"({"type":"number","exclusiveMinimum":0,"exclusiveMaximum":1})", 0, 1, true, true},
      {R"({"type":"number","minimum":0})", 0, std::nullopt},
      {R"({"type":"number","exclusiveMaximum":0})", std::nullopt, 0, false, true},
      {R"({"type":"number","minimum":5,"maximum":5})", 5, 5},
      {R"({"type":"number","exclusiveMinimum":-10,"maximum":-3})", -10, -3, true, false},
      {R"({"type":"number","minimum":-1,"exclusiveMinimum":-1,"maximum":10,"exclusiveMaximum":12})",
       -1, 10, true, false},
  };
  const char* fractions[] = {"", ".0", ".5", ".25", ".05", ".000", ".999", ".0001"};
  for (const Case& c : cases) {
    auto g = compile(Json::parse(c.schema));
    ASSERT_NE(g, nullptr) << c.schema;
    for (const char* sign : {"", "-"}) {
      for (int i = 0; i <= 12; ++i) {
        for (const char* fraction : fractions) {
          const std::string text = sign + std::to_string(i) + fraction;
          const double v = std::strtod(text.c_str(), nullptr);
          if (sign[0] == '-' && v == 0) continue;
          const bool above = !c.lo || (c.lo_exclusive ? v > *c.lo : v >= *c.lo);
          const bool below = !c.hi || (c.hi_exclusive ? v < *c.hi : v <= *c.hi);
          EXPECT_EQ(matches(g, text), above && below) << c.schema << " " << text;
        }
      }
    }
    EXPECT_FALSE(matches(g, "1e0")) << c.schema;
    EXPECT_FALSE(matches(g, "01")) << c.schema;
  }
  EXPECT_NE(error_of(Json::parse(R"({"type":"number","exclusiveMinimum":2,"maximum":2})"))
                .find("no value"),
            std::string::npos);
  auto unbounded = compile(Json::parse(R"({"type":"number"})"));
  EXPECT_TRUE(matches(unbounded, "1e5"));  // no bounds: exponents as before
}

// oneOf compiles only when its branches are disjoint; overlap is a 400
// naming the branches.
TEST(JsonSchema, OneOfNeedsDisjointBranches) {
  auto by_type = compile(Json::parse(R"({"oneOf":[{"type":"string"},{"type":"integer"}]})"));
  EXPECT_TRUE(matches(by_type, "\"a\""));
  EXPECT_TRUE(matches(by_type, "3"));
  auto tagged = compile(Json::parse(R"({"$defs":{"cat":{"type":"object","properties":{
      "kind":{"const":"cat"},"lives":{"type":"integer"}},"required":["kind"]}},
      "oneOf":[{"$ref":"#/$defs/cat"},{"type":"object","properties":{"kind":{"enum":["dog","wolf"]},
      "bark":{"type":"boolean"}},"required":["kind","bark"]}]})"));
  EXPECT_TRUE(matches(tagged, R"({"kind":"cat","lives":9})"));
  EXPECT_TRUE(matches(tagged, R"({"kind":"wolf","bark":true})"));
  EXPECT_FALSE(matches(tagged, R"({"kind":"cat","bark":true})"));
  auto values = compile(Json::parse(R"({"oneOf":[{"enum":[1,2]},{"const":3}]})"));
  EXPECT_TRUE(matches(values, "3"));
  for (const char* overlapping :
       {R"({"oneOf":[{"type":"integer"},{"type":"number"}]})",
        R"({"oneOf":[{"enum":[1,2]},{"enum":[2,3]}]})",
        R"({"oneOf":[{"type":"object","properties":{"a":{"type":"string"}}},{"type":"object"}]})",
        R"({"oneOf":[{"type":"string"},{}]})"}) {
    const std::string error = error_of(Json::parse(overlapping));
    EXPECT_NE(error.find("'oneOf' at '#': branches 0 and 1 may both match"), std::string::npos)
        << overlapping << ": " << error;
  }
}

// strict: false is JSON schema's own default: extra keys unless forbidden.
TEST(JsonSchema, NonStrictAllowsAdditionalProperties) {
  const Json schema = Json::parse(R"({"type":"object","properties":{"a":{"type":"integer"},
      "o":{"type":"object","properties":{"b":{"type":"boolean"}},"additionalProperties":false}},
      "required":["a"]})");
  JsonSchemaOptions loose;
  loose.strict = false;
  auto text = json_schema_to_gbnf(schema, loose);
  ASSERT_TRUE(text.ok()) << text.message();
  auto g = std::make_shared<const Grammar>(parse_gbnf(*text).value());
  EXPECT_TRUE(matches(g, R"({"a":1,"zz":[true]})"));
  EXPECT_TRUE(matches(g, R"({"a":1,"o":{"b":true},"zz":null})"));
  EXPECT_FALSE(matches(g, R"({"a":1,"o":{"b":true,"c":1}})"));  // stated false stays false
  EXPECT_FALSE(matches(g, R"({"zz":1})"));                      // required still required
  EXPECT_FALSE(matches(g, R"({"a":1,"a":"x"})"));  // an extra key is never a declared one
  EXPECT_TRUE(matches(g, R"({"a":1,"ab":"x","":1,"oo":2})"));
  EXPECT_FALSE(matches(g, R"({"a":1,"\u0061":"x"})"));  // nor spells one with escapes
  auto strict = compile(schema);
  EXPECT_FALSE(matches(strict, R"({"a":1,"zz":[true]})"));
}

TEST(JsonSchema, JsonObjectGrammar) {
  auto g = std::make_shared<const Grammar>(parse_gbnf(json_object_gbnf()).value());
  EXPECT_TRUE(matches(g, R"({"a":[1,2,{"b":null}],"c":"d"})"));
  EXPECT_FALSE(matches(g, "[1]"));
  EXPECT_FALSE(matches(g, "\"x\""));
}

}  // namespace
}  // namespace specstack::grammar
