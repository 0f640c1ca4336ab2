// The Jinja2 subset feature by feature. Expected strings are what Python
// jinja2 3.1.6 renders with transformers' settings (trim_blocks,
// lstrip_blocks, json.dumps tojson).
#include <gtest/gtest.h>

#include <string>

#include "chat/chat_template.h"

namespace specstack {
namespace {

using nlohmann::ordered_json;

struct Case {
  const char* tmpl;
  const char* context;  // JSON object
  const char* expected;
};

void expect_renders(const Case& c) {
  SCOPED_TRACE(c.tmpl);
  auto tmpl = ChatTemplate::parse(c.tmpl);
  ASSERT_TRUE(tmpl.ok()) << tmpl.message();
  auto out = tmpl->render(ordered_json::parse(c.context));
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_EQ(*out, c.expected);
}

// The error message of a template that fails to parse or render.
std::string error_of(const char* source, const ordered_json& context = ordered_json::object(),
                     const ChatRenderLimits& limits = {}) {
  auto tmpl = ChatTemplate::parse(source);
  if (!tmpl.ok()) return tmpl.message();
  auto out = tmpl->render(context, limits);
  if (out.ok()) return "<rendered: " + *out + ">";
  return out.message();
}

TEST(JinjaWhitespace, TrimAndLstripBlocks) {
  const Case cases[] = {
      {"{% if true %}\n  x\n{% endif %}\nafter", "{}", "  x\nafter"},
      {"  {% if true %}\n  x\n  {% endif %}\n  y  {% if true %}z{% endif %}\n", "{}",
       "  x\n  y  z"},
      // lstrip_blocks never touches {{ }} and only strips at line start.
      {"{{ 'x' }}  {% if true %}a{% endif %}", "{}", "x  a"},
      {"  {{ 'x' }}\n", "{}", "  x"},
      {"{% if true %}   \n  x{% endif %}", "{}", "   \n  x"},
      {"a\n\t {% for i in [1] %}\n{{ i }}\n\t {% endfor %}\nb", "{}", "a\n1\nb"},
  };
  for (const Case& c : cases) expect_renders(c);
}

TEST(JinjaWhitespace, MinusAndPlusModifiers) {
  const Case cases[] = {
      {"a  \n {%- if true -%} \n b \n {%- endif -%}\n  c", "{}", "abc"},
      {"a  {{- 'b' -}}  c", "{}", "abc"},
      {"a\n  {%+ if true %}b{% endif +%}\nc", "{}", "a\n  b\nc"},
      {"x {#- comment -#} y", "{}", "xy"},
      {"{# comment #}\n  {# c2 #}\nx\n{#- c3 -#}\n  y", "{}", "xy"},
      {"{%- if x -%}\n  a  \n{%- endif -%}\n b", R"({"x": true})", "ab"},
  };
  for (const Case& c : cases) expect_renders(c);
}

TEST(JinjaWhitespace, RawAndNewlines) {
  const Case cases[] = {
      {"{% raw %}{{ x }}{% if %}{% endraw %}", "{}", "{{ x }}{% if %}"},
      {"  {% raw %}\n  x\n  {% endraw %}\n", "{}", "\n  x\n"},
      // \r\n becomes \n and one trailing newline is dropped (keep_trailing_newline off).
      {"a\r\nb\rc\n", "{}", "a\nb\nc"},
      {"a\n\n", "{}", "a\n"},
  };
  for (const Case& c : cases) expect_renders(c);
}

TEST(JinjaExpressions, ArithmeticAndPrinting) {
  const Case cases[] = {
      {"{{ 1e16 }} {{ 1e15 }} {{ 1.5e-5 }} {{ 0.0001 }} {{ 0.1 + 0.2 }}", "{}",
       "1e+16 1000000000000000.0 1.5e-05 0.0001 0.30000000000000004"},
      {"{{ 7/2 }} {{ 6/2 }} {{ 7//2 }} {{ -7//2 }} {{ -7 % 3 }} {{ 2**10 }} {{ 2 ** 3 ** 2 }}",
       "{}", "3.5 3.0 3 -4 2 1024 64"},
      {"{{ 10.5 // 4 }} {{ -10.5 % 4 }} {{ -1|abs }} {{ 'ab' * 2 }} {{ [1] * 2 }}", "{}",
       "2.0 1.5 1 abab [1, 1]"},
      {"{{ 'a' ~ 1 ~ none ~ u ~ true }}", "{}", "a1NoneTrue"},
      {"{{ (1, 2) }}{{ (1,) }}{{ [1, 'a', none, true, 1.5] }}{{ {'a': 1} }}", "{}",
       "(1, 2)(1,)[1, 'a', None, True, 1.5]{'a': 1}"},
      {"{{ [\"it's\", 'a\"b', 'x\\ny'] }}", "{}", R"(["it's", 'a"b', 'x\ny'])"},
      {"{{ 'a\\tb\\x41\\u00e9\\'' }}{{ \"q\\\"\" }}{{ 'x' 'y' }}", "{}", "a\tbAé'q\"xy"},
      {"{{ true and 'x' }}|{{ 0 or [] }}|{{ none or 'y' }}|{{ not 0 }}", "{}", "x|[]|y|True"},
      {"{{ 1 < 2 < 3 }}{{ 3 > 2 > 2 }}{{ 'a' < 'b' }}{{ [1, 2] < [1, 3] }}", "{}",
       "TrueFalseTrueTrue"},
      {"{{ 'b' in 'abc' }}{{ 2 not in [1, 2] }}{{ 'k' in d }}", R"({"d": {"k": 1}})",
       "TrueFalseTrue"},
      {"{{ 'a' if x else 'b' }}|{{ 'c' if x }}|", R"({"x": false})", "b||"},
  };
  for (const Case& c : cases) expect_renders(c);
}

TEST(JinjaExpressions, SubscriptsSlicesAndAttributes) {
  const Case cases[] = {
      {"{{ 'abc'[::-1] }}{{ [1, 2, 3][1:] }}{{ 'héllo'[1] }}{{ 'héllo'|length }}", "{}",
       "cba[2, 3]é5"},
      {"{{ [1, 2, 3, 4, 5][1:4:2] }}{{ l[-1] }}{{ l[5] }}|{{ l[::-2] }}{{ l[:-1] }}",
       R"({"l": [1, 2, 3]})", "[2, 4]3|[3, 1][1, 2]"},
      {"{{ m.role }}{{ m['role'] }}{{ m.missing }}|{{ m.content.strip() }}",
       R"({"m": {"role": "user", "content": " hi "}})", "useruser|hi"},
      {"{{ d['items'] }}{{ d.get('items') }}{{ d.get('z', 5) }}{{ d.get('z') }}",
       R"({"d": {"items": 1}})", "115None"},
      {"{{ none.x }}|{{ (3).x }}|", "{}", "||"},
      {"{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys()|list }}",
       R"({"d": {"b": 1, "a": [1]}})", "b=1;a=[1];['b', 'a']"},
  };
  for (const Case& c : cases) expect_renders(c);
}

TEST(JinjaExpressions, StringMethods) {
  const Case cases[] = {
      {"{{ 'a,b,,c'.split(',') }}{{ ' a  b '.split() }}{{ 'a b c'.split(' ', 1) }}", "{}",
       "['a', 'b', '', 'c']['a', 'b']['a', 'b c']"},
      {"{{ 'a-b-c'.rsplit('-', 1) }}{{ 'aXbX'.replace('X', '') }}{{ ', '.join(['a', 'b']) }}", "{}",
       "['a-b', 'c']aba, b"},
      {"{{ 'xxaxx'.strip('x') }}|{{ '\\n\\na'.lstrip('\\n') }}|{{ 'a\\n\\n'.rstrip('\\n') }}|",
       "{}", "a|a|a|"},
      {"{{ 'abc'.startswith(('x', 'a')) }}{{ 'abc'.endswith('bc') }}{{ 'hello world'.title() }}",
       "{}", "TrueTrueHello World"},
      {"{{ 'ABC'.lower() }}{{ 'abc'.upper() }}{{ 'ab'.find('b') }}{{ 'aaa'.count('a') }}", "{}",
       "abcABC13"},
  };
  for (const Case& c : cases) expect_renders(c);
}

TEST(JinjaFilters, CommonFilters) {
  const Case cases[] = {
      {"{{ '  x  '|trim }}|{{ ' \u3000x\u00a0'|trim }}|{{ 'xxyxx'|trim('x') }}", "{}", "x|x|y"},
      {"{{ 'hELLO'|capitalize }} {{ 'hello world-foo'|title }} {{ 'Ab'|lower }}{{ 'Ab'|upper }}",
       "{}", "Hello Hello World-Foo abAB"},
      {"{{ x|default('d') }}{{ ''|default('d') }}{{ ''|default('d', true) }}{{ 0|d(5) }}", "{}",
       "dd0"},
      {"{{ [1, 2, 3]|first }}{{ [1, 2, 3]|last }}{{ 'abc'|first }}{{ []|first }}|", "{}", "13a|"},
      {"{{ [1, 2, 3]|join }}{{ [1, 2, 3]|join('-') }}{{ [{'a': 1}, {'a': 2}]|join(',', "
       "attribute='a') }}",
       "{}", "1231-2-31,2"},
      {"{{ 'ab'|list }}{{ {'a': 1}|list }}{{ {'a': 1}|items|list }}{{ u|items|list }}", "{}",
       "['a', 'b']['a'][('a', 1)][]"},
      {"{{ 'aXbX'|replace('X', '-') }}{{ 'aaa'|replace('a', 'b', 2) }}{{ 5|string }}{{ 'x'|safe }}",
       "{}", "a-b-bba5x"},
      {"{{ [3, 1, 2]|sort }}{{ ['b', 'A', 'c']|sort }}{{ [3, 1, 2]|sort(reverse=true) }}", "{}",
       "[1, 2, 3]['A', 'b', 'c'][3, 2, 1]"},
      {"{{ [3, 1, 2]|max }}{{ [3, 1, 2]|min }}{{ [1, 2]|sum }}{{ [1, 1, 2]|unique|list }}", "{}",
       "313[1, 2]"},
      {"{{ 'abc'|reverse }}{{ [1, 2]|reverse|list }}{{ {'b': 1, 'a': 2}|dictsort }}", "{}",
       "cba[2, 1][('a', 2), ('b', 1)]"},
      {"{{ '3.0'|float }}{{ 3.7|int }}{{ '4'|int + 1 }}{{ 'x'|int }}{{ 'x'|int(7) }}", "{}",
       "3.03507"},
      {"{{ '<a&\"\\'>'|e }}", "{}", "&lt;a&amp;&#34;&#39;&gt;"},
      {"{{ 'x'|indent(2) }}|{{ 'a\\nb\\n\\nc'|indent(2) }}|{{ 'a\\nb'|indent(2, true) }}", "{}",
       "x|a\n  b\n\n  c|  a\n  b"},
      {"{{ ms|selectattr('role', 'equalto', 'u')|map(attribute='c')|list }}"
       "{{ ms|rejectattr('role', 'eq', 'u')|list|length }}{{ [1, 2, 3]|select('odd')|list }}"
       "{{ [1, 2, 3]|reject('odd')|list }}{{ [1, 'a']|map('string')|list }}",
       R"({"ms": [{"role": "u", "c": 1}, {"role": "a", "c": 2}]})", "[1]1[1, 3][2]['1', 'a']"},
  };
  for (const Case& c : cases) expect_renders(c);
}

TEST(JinjaFilters, ToJsonMatchesPythonJsonDumps) {
  const Case cases[] = {
      {"{{ x|tojson }}", R"({"x": {"b": [1, 2.0, "é\"\n"], "a": null, "t": true}})",
       R"({"b": [1, 2.0, "é\"\n"], "a": null, "t": true})"},
      {"{{ x|tojson(indent=2) }}", R"({"x": {"a": [1, {}, []], "b": {"c": null}}})",
       "{\n  \"a\": [\n    1,\n    {},\n    []\n  ],\n  \"b\": {\n    \"c\": null\n  }\n}"},
      {"{{ x|tojson(ensure_ascii=true, sort_keys=true) }}{{ x|tojson(separators=(',', ':')) }}",
       R"({"x": {"b": "é😀", "a": [1, 2]}})",
       R"({"a": [1, 2], "b": "\u00e9\ud83d\ude00"}{"b":"é😀","a":[1,2]})"},
      {"{{ 'é\u2028\x7f'|tojson }}{{ (1, 2)|tojson }}{{ 1.0|tojson }}{{ 1e100|tojson }}", "{}",
       "\"é\u2028\x7f\"[1, 2]1.01e+100"},
  };
  for (const Case& c : cases) expect_renders(c);
}

TEST(JinjaTests, IsTests) {
  const Case cases[] = {
      {"{{ u is defined }}{{ u is undefined }}{{ n is none }}{{ n is not none }}", R"({"n": null})",
       "FalseTrueTrueFalse"},
      {"{{ 'a' is string }}{{ 1 is number }}{{ true is number }}{{ true is integer }}{{ 1.0 is "
       "float }}",
       "{}", "TrueTrueTrueFalseTrue"},
      {"{{ {} is mapping }}{{ [] is mapping }}{{ 'a' is sequence }}{{ {} is sequence }}"
       "{{ u is iterable }}{{ n is iterable }}",
       R"({"n": null})", "TrueFalseTrueTrueTrueFalse"},
      {"{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 3 is odd }}{{ 2 is even }}"
       "{{ 9 is divisibleby 3 }}{{ 'a' is in 'abc' }}{{ 1 is eq 1 }}{{ 2 is gt 1 }}",
       "{}", "TrueFalseTrueTrueTrueTrueTrueTrueTrue"},
      {"{{ 'abc' is lower }}{{ 'ABC' is upper }}{{ raise_exception is callable }}", "{}",
       "TrueTrueTrue"},
  };
  for (const Case& c : cases) expect_renders(c);
}

TEST(JinjaStatements, LoopsAndLoopVariable) {
  const Case cases[] = {
      {"{% for x in 'ab' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
       "{{ loop.first }}{{ loop.last }}{{ loop.length }}|{% endfor %}",
       "{}", "1021TrueFalse2|2110FalseTrue2|"},
      {"{% for x in 'abc' %}{{ loop.previtem }}{{ loop.nextitem }}{{ loop.cycle('x', 'y') }}|"
       "{% endfor %}",
       "{}", "bx|acy|bx|"},
      {"{% for x in [1, 2, 3] if x > 1 %}{{ loop.index }}/{{ loop.length }}{% else %}none"
       "{% endfor %}{% for x in [] %}a{% else %}none{% endfor %}",
       "{}", "1/22/2none"},
      {"{% for a in [1, 2] %}{% for b in [3] %}{{ loop.index }}{{ a }}{% endfor %}{{ loop.index }}"
       "{% endfor %}",
       "{}", "111122"},
      {"{% for i in range(5) %}{% if i == 1 %}{% continue %}{% endif %}{% if i == 3 %}{% break %}"
       "{% endif %}{{ i }}{% endfor %}{{ range(1, 10, 3)|list }}{{ range(3, 0, -1)|list }}",
       "{}", "02[1, 4, 7][3, 2, 1]"},
      {"{% for m in messages[::-1] %}{{ m }}{% endfor %}", R"({"messages": ["a", "b", "c"]})",
       "cba"},
  };
  for (const Case& c : cases) expect_renders(c);
}

TEST(JinjaStatements, ScopingAndNamespace) {
  const Case cases[] = {
      // A set inside a loop body does not survive the iteration (jinja2 scoping)...
      {"{% set x = 0 %}{% for i in range(3) %}{{ x }}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}",
       "{}", "0101010"},
      // ...but one inside an if does, and namespaces carry state out of loops.
      {"{% if true %}{% set y = 5 %}{% endif %}{{ y }}", "{}", "5"},
      {"{% set ns = namespace(a=1, found=false) %}{% for i in [1, 2, 3] %}{% set ns.a = ns.a + i %}"
       "{% if i == 2 %}{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.a }}{{ ns.found }}"
       "{{ ns['a'] }}{{ ns.missing }}",
       "{}", "7True7"},
      {"{% set ns = namespace(items=[]) %}{% for i in range(3) %}{% set ns.items = ns.items + [i] "
       "%}"
       "{% endfor %}{{ ns.items }}",
       "{}", "[0, 1, 2]"},
      {"{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = 1, 2 %}{{ t }}", "{}", "12(1, 2)"},
      {"{% set x %}hi {{ 1 }}{% endset %}[{{ x }}]{% set y | upper %}up{% endset %}{{ y }}", "{}",
       "[hi 1]UP"},
      {"{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", "{}", "3[]"},
      {"{% filter upper %}abc{{ 'd' }}{% endfilter %}", "{}", "ABCD"},
      {"{% generation %}gen{% endgeneration %}", "{}", "gen"},
  };
  for (const Case& c : cases) expect_renders(c);
}

TEST(JinjaStatements, Macros) {
  const Case cases[] = {
      {"{% macro f(a, b=2) %}[{{ a }}{{ b }}{{ x }}]{% endmacro %}{% set x = 9 %}{{ f(1) }}"
       "{{ f(1, b=3) }}{{ f(b=4, a=0) }}",
       "{}", "[129][139][049]"},
      // Macros see template-level variables, not the caller's loop scope.
      {"{% set x = 1 %}{% macro f() %}{{ x }}{% endmacro %}{% for i in [1] %}{% set x = 2 %}"
       "{{ f() }}{% endfor %}",
       "{}", "1"},
      {"{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}"
       "{% endmacro %}{{ fact(5) }}",
       "{}", "120"},
  };
  for (const Case& c : cases) expect_renders(c);
}

// "<prefix> at offset N<suffix>", with N where `marker` first occurs in source.
std::string at_marker(const std::string& prefix, const std::string& source,
                      const std::string& marker, const std::string& suffix = "") {
  const size_t offset = source.find(marker);
  EXPECT_NE(offset, std::string::npos) << marker;
  return prefix + " at offset " + std::to_string(offset) + suffix;
}

TEST(JinjaErrors, ParseErrorsNameConstructAndOffset) {
  const std::string syntax = "chat template syntax error: ";
  struct ParseCase {
    const char* source;
    const char* marker;  // where the error points
    std::string prefix;
    std::string suffix;
  };
  const ParseCase cases[] = {
      {"ab{% if x %}no end", "{%", syntax + "unclosed '{% if %}'",
       ": expected 'elif', 'else', 'endif'"},
      {"{% include 'x' %}", "{%", syntax + "unsupported tag 'include'", ""},
      {"{% frobnicate %}", "{%", syntax + "unknown tag 'frobnicate'", ""},
      {"x{% endfor %}", "{%", syntax + "unexpected '{% endfor %}'", ""},
      {"{% for x in y %}{% else %}no end", "{% for", syntax + "unclosed '{% for %}'",
       ": expected 'endfor'"},
      {"{{ x | nosuchfilter }}", "nosuch", syntax + "no filter named 'nosuchfilter'", ""},
      {"{{ x is nosuchtest }}", "nosuch", syntax + "no test named 'nosuchtest'", ""},
      {"{{ 1 + }}", "}}", syntax + "unexpected token in expression", " (found '}}')"},
      {"{{ [1, 2 }}", "}", syntax + "unexpected '}'", ""},
      {"{{ x ) }}", ")", syntax + "unexpected ')'", ""},
      {"{{ 'abc }}", "'", syntax + "unterminated string literal", ""},
      {"{{ x ", "{{", syntax + "unclosed '{{' opened", ""},
      {"{# x", "{#", syntax + "unclosed comment '{#'", ""},
      {"{% break %}", "{%", syntax + "'break' outside of a loop", ""},
      {"{% set true = 1 %}", "true", syntax + "cannot assign to 'true'", ""},
      {"{{ f(a=1, 2) }}", "2", syntax + "positional argument follows keyword argument",
       " (found '2')"},
  };
  for (const ParseCase& c : cases) {
    EXPECT_EQ(error_of(c.source), at_marker(c.prefix, c.source, c.marker, c.suffix)) << c.source;
  }
}

TEST(JinjaErrors, RuntimeErrorsComeBackAsErrors) {
  // raise_exception's message reaches the caller verbatim, like jinja2's TemplateError.
  EXPECT_EQ(error_of("{% if true %}{{ raise_exception('Roles must alternate') }}{% endif %}"),
            "Roles must alternate");
  const std::string runtime = "chat template error";
  struct RuntimeCase {
    const char* source;
    const char* marker;
    const char* message;
  };
  const RuntimeCase cases[] = {
      {"{{ u.x }}", ".", ": 'u' is undefined"},
      {"{{ 'a' + 1 }}", "+", ": can only concatenate str (not \"int\") to str"},
      {"{{ 1 // 0 }}", "//", ": integer division or modulo by zero"},
      {"{{ 'a' in none }}", "none", ": argument of type 'NoneType' is not iterable"},
      {"{{ x() }}", "(", ": 'x' is undefined"},
      {"{{ 1() }}", "(", ": 'int' object is not callable"},
      {"{{ u|tojson }}", "tojson",
       ": filter 'tojson': Object of type Undefined is not JSON serializable"},
      {"{{ [1]|join(',') }}{{ 'a'.split('') }}", "(''", ": split(): empty separator"},
      {"{% set x = 1 %}{% set x.a = 2 %}", "{% set x.",
       ": cannot assign attribute on non-namespace object"},
      {"{% for a, b in [[1, 2, 3]] %}{% endfor %}", "{%", ": cannot unpack 3 values into 2 names"},
      {"{{ 9223372036854775807 + 1 }}", "+", ": integer overflow in '+'"},
      {"{% macro f(a) %}{% endmacro %}{{ f(1, 2) }}", "{%",
       ": macro 'f' takes not more than 1 argument(s)"},
  };
  for (const RuntimeCase& c : cases) {
    EXPECT_EQ(error_of(c.source), at_marker(runtime, c.source, c.marker, c.message)) << c.source;
  }
}

TEST(JinjaLimits, RunawayTemplatesAreStopped) {
  const std::string runtime = "chat template error";
  ChatRenderLimits small;
  small.max_output_bytes = 1000;
  std::string src = "{% for i in range(100) %}0123456789ab{% endfor %}";
  EXPECT_EQ(error_of(src.c_str(), ordered_json::object(), small),
            at_marker(runtime, src, "0123", ": rendered output exceeds 1000 bytes"));
  src = "{{ 'x' * 2000 }}";
  EXPECT_EQ(error_of(src.c_str(), ordered_json::object(), small),
            at_marker(runtime, src, "*", ": string repetition exceeds 1000 bytes"));
  src = "{% set s = 'x' * 600 %}{{ (s ~ s)|length }}";
  EXPECT_EQ(error_of(src.c_str(), ordered_json::object(), small),
            at_marker(runtime, src, "~", ": string exceeds 1000 bytes"));
  src = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
  EXPECT_EQ(error_of(src.c_str()),
            at_marker(runtime, src, "{%", ": macro 'f' recursed deeper than 20"));
  src = "{{ range(1000000)|list }}";
  EXPECT_EQ(error_of(src.c_str()),
            at_marker(runtime, src, "(",
                      ": range too big: the sandbox blocks ranges larger than 100000"));
  ChatRenderLimits little_work;
  little_work.max_work = 10000;
  EXPECT_NE(error_of("{% for i in range(100) %}{% for j in range(100) %}{% endfor %}{% endfor %}",
                     ordered_json::object(), little_work)
                .find("template exceeded its work limit"),
            std::string::npos);
  src =
      "{% set ns = namespace(l=[]) %}{% for i in range(100) %}{% set ns.l = [ns.l] %}{% endfor %}";
  EXPECT_EQ(error_of(src.c_str()),
            at_marker(runtime, src, "[ns.l]", ": value nested deeper than 64"));
  // A namespace holding itself would be a reference cycle: refused.
  src = "{% set ns = namespace() %}{% set ns.me = [ns] %}";
  EXPECT_EQ(error_of(src.c_str()),
            at_marker(runtime, src, "{% set ns.", ": a namespace cannot hold a namespace"));
}

TEST(JinjaLimits, DeepNestingIsAParseErrorNotAStackOverflow) {
  const std::string parens = std::string(100000, '(') + "1" + std::string(100000, ')');
  EXPECT_NE(error_of(("{{ " + parens + " }}").c_str()).find("nested too deeply"),
            std::string::npos);
  std::string chain = "{{ 1";
  for (int i = 0; i < 100000; ++i) chain += " + 1";
  EXPECT_NE(error_of((chain + " }}").c_str()).find("nested too deeply"), std::string::npos);
  std::string ifs;
  for (int i = 0; i < 10000; ++i) ifs += "{% if true %}";
  EXPECT_NE(error_of(ifs.c_str()).find("nested too deeply"), std::string::npos);
  // Context JSON deeper than the value depth limit is refused up front.
  ordered_json deep = 1;
  for (int i = 0; i < 1000; ++i) deep = ordered_json::array({deep});
  EXPECT_EQ(error_of("{{ x }}", {{"x", deep}}), "context JSON is nested too deeply");
}

TEST(JinjaGlobals, StrftimeNowFormatsTheCurrentTime) {
  auto tmpl =
      ChatTemplate::parse("{{ strftime_now('%Y') | length }} {{ strftime_now('%d %b %Y')[2] }}");
  ASSERT_TRUE(tmpl.ok());
  auto out = tmpl->render(ordered_json::object());
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_EQ(*out, "4  ");
}

}  // namespace
}  // namespace specstack
