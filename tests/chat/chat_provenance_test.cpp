// User-text provenance through the template interpreter: which bytes of a
// rendering came from the request (messages, tools). Renderings are shown
// with user text between « and », so each expectation reads as the rule it
// checks: substrings keep exact ranges, concatenation shifts them, other
// transformations mark their whole result.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "chat/chat_template.h"

namespace specstack {
namespace {

using nlohmann::ordered_json;

std::string show(const ChatRender& r) {
  EXPECT_TRUE(ranges_valid(r.user_text, r.text.size())) << r.text;
  std::string out;
  size_t done = 0;
  for (const TextRange& range : r.user_text) {
    out += r.text.substr(done, range.begin - done);
    out += "\u00ab" + r.text.substr(range.begin, range.end - range.begin) + "\u00bb";
    done = range.end;
  }
  return out + r.text.substr(done);
}

// Renders `source` with messages [{role: user, content: a}, {role: user, content: b}],
// bos_token "<s>" (server text) and `tools` as given.
std::string marked(const std::string& source, const std::string& a, const std::string& b = "",
                   const ordered_json& tools = nullptr) {
  auto tmpl = ChatTemplate::parse(source);
  EXPECT_TRUE(tmpl.ok()) << tmpl.message();
  if (!tmpl.ok()) return "<parse error>";
  ordered_json context = {
      {"messages", {{{"role", "user"}, {"content", a}}, {{"role", "user"}, {"content", b}}}},
      {"bos_token", "<s>"}};
  if (!tools.is_null()) context["tools"] = tools;
  auto out = tmpl->render_marked(context);
  EXPECT_TRUE(out.ok()) << out.message();
  if (!out.ok()) return "<render error>";
  // render() is the same text without the ranges.
  auto plain = tmpl->render(context);
  EXPECT_TRUE(plain.ok());
  if (plain.ok()) {
    EXPECT_EQ(*plain, out->text);
  }
  return show(*out);
}

const char* const kA = "{% set a = messages[0].content %}{% set b = messages[1].content %}";

TEST(ChatProvenance, OutputAndTemplateLiterals) {
  EXPECT_EQ(marked(std::string(kA) + "{{ bos_token }}<|u|>{{ a }}<|e|>", "hi"),
            "<s><|u|>\u00abhi\u00bb<|e|>");
  // Empty user text marks nothing.
  EXPECT_EQ(marked(std::string(kA) + "[{{ a }}]", ""), "[]");
}

TEST(ChatProvenance, ConcatenationShiftsAndMerges) {
  EXPECT_EQ(marked(std::string(kA) + "{{ '<t>' + a + '</t>' }}", "x"), "<t>\u00abx\u00bb</t>");
  EXPECT_EQ(marked(std::string(kA) + "{{ a ~ 5 ~ b }}", "x", "y"), "\u00abx\u00bb5\u00aby\u00bb");
  // Adjacent user text merges into one range.
  EXPECT_EQ(marked(std::string(kA) + "{{ a + b }}|{{ a }}{{ b }}", "x", "y"),
            "\u00abxy\u00bb|\u00abxy\u00bb");
  EXPECT_EQ(marked(std::string(kA) + "{{ (a ~ '-') * 2 }}", "x"), "\u00abx\u00bb-\u00abx\u00bb-");
}

TEST(ChatProvenance, SlicingAndIndexingKeepExactRanges) {
  const std::string set = std::string(kA) + "{% set s = 'ab' ~ a ~ 'yz' %}";
  EXPECT_EQ(marked(set + "{{ s[1:4] }}", "cd"), "b\u00abcd\u00bb");
  EXPECT_EQ(marked(set + "{{ s[3:] }}", "cd"), "\u00abd\u00bbyz");
  EXPECT_EQ(marked(set + "{{ s[0] }}{{ s[2] }}{{ s[-1] }}", "cd"), "a\u00abc\u00bbz");
  EXPECT_EQ(marked(set + "{{ s[::-1] }}", "cd"), "zy\u00abdc\u00bbba");
  // Code points, not bytes: the two-byte 'é' stays whole.
  EXPECT_EQ(marked(set + "{{ s[2:3] }}", "\u00e9d"), "\u00ab\u00e9\u00bb");
  EXPECT_EQ(marked(set + "{{ s | first }}{{ a | last }}", "cd"), "a\u00abd\u00bb");
}

TEST(ChatProvenance, StripKeepsExactRanges) {
  EXPECT_EQ(marked(std::string(kA) + "{{ ('  <' ~ a ~ '>  ').strip() }}", " x "),
            "<\u00ab x \u00bb>");
  EXPECT_EQ(marked(std::string(kA) + "{{ ('\n' ~ a).lstrip() }}|{{ a.rstrip('!') }}", "\n x!", ""),
            "\u00abx!\u00bb|\u00ab\n x\u00bb");
  EXPECT_EQ(marked(std::string(kA) + "{{ (a ~ '  ') | trim }}", " y"), "\u00aby\u00bb");
}

TEST(ChatProvenance, SplitPiecesKeepExactRanges) {
  EXPECT_EQ(marked(std::string(kA) + "{{ ('a|' ~ a).split('|') | join(',') }}", "b|c"),
            "a,\u00abb\u00bb,\u00abc\u00bb");
  // The piece after a separator is where the separator ends, not where a
  // search for it would first find it ("xab" is template text, "a" user text).
  EXPECT_EQ(marked(std::string(kA) + "{{ ('xab' ~ a).split('ab') | join('/') }}", "a"),
            "x/\u00aba\u00bb");
  EXPECT_EQ(marked(std::string(kA) + "{{ ('t ' ~ a).split() | join('_') }}", " u  v "),
            "t_\u00abu\u00bb_\u00abv\u00bb");
  EXPECT_EQ(marked(std::string(kA) + "{{ ('t\n' ~ a).splitlines() | join('|') }}", "u\n\nv"),
            "t|\u00abu\u00bb||\u00abv\u00bb");
  EXPECT_EQ(marked(std::string(kA) + "{{ (a ~ ':t').rsplit(':', 1)[0] }}", "x:y"),
            "\u00abx:y\u00bb");
}

TEST(ChatProvenance, JoinShiftsEveryPiece) {
  EXPECT_EQ(marked(std::string(kA) + "{{ [a, 'lit', b] | join(b) }}", "x", "-"),
            "\u00abx-\u00bblit\u00ab--\u00bb");
  EXPECT_EQ(marked(std::string(kA) + "{{ '+'.join([a, 'k']) }}", "x"), "\u00abx\u00bb+k");
  EXPECT_EQ(
      marked(std::string(kA) + "{{ messages | map(attribute='content') | join(' ') }}", "x", "y"),
      "\u00abx\u00bb \u00aby\u00bb");
}

TEST(ChatProvenance, OtherTransformationsMarkTheWholeResult) {
  // replace: the template's own "<t>" becomes user text too (the safe side).
  EXPECT_EQ(marked(std::string(kA) + "{{ ('<t>' ~ a).replace('z', 'y') }}", "z"),
            "\u00ab<t>y\u00bb");
  EXPECT_EQ(marked(std::string(kA) + "{{ '<t>'.replace('t', a) }}", "u"), "\u00ab<u>\u00bb");
  EXPECT_EQ(marked(std::string(kA) + "{{ ('<t>' ~ a) | replace('t', 'u') }}", "z"),
            "\u00ab<u>z\u00bb");
  EXPECT_EQ(marked(std::string(kA) + "{{ a | upper }}{{ a.title() }}", "ab"), "\u00abABAb\u00bb");
  EXPECT_EQ(marked(std::string(kA) + "{{ messages[0] | tojson }}", "x"),
            "\u00ab{\"role\": \"user\", \"content\": \"x\"}\u00bb");
  EXPECT_EQ(marked(std::string(kA) + "{{ ('a\n' ~ b) | indent(2) }}", "", "b"),
            "\u00aba\n  b\u00bb");
  // str() of a container that holds user text.
  EXPECT_EQ(marked(std::string(kA) + "{{ a.split(' ') }}", "p q"), "\u00ab['p', 'q']\u00bb");
  EXPECT_EQ(marked(std::string(kA) + "{% filter upper %}<{{ a }}>{% endfilter %}", "x"),
            "\u00ab<X>\u00bb");
}

TEST(ChatProvenance, TemplateOnlyStringsStayTemplateText) {
  EXPECT_EQ(marked(std::string(kA) + "{{ '<t>'.replace('t', 'u') | upper }}{{ [1, 'x'] }}", "z"),
            "<U>[1, 'x']");
  // Comparisons, `in` and tests use user text without marking anything.
  EXPECT_EQ(marked(std::string(kA) +
                       "{% if a == 'hi' and 'h' in a and a.startswith('h') %}yes{% endif %}",
                   "hi"),
            "yes");
  EXPECT_EQ(marked(std::string(kA) + "{{ a | length }}", "hello"), "5");
}

TEST(ChatProvenance, LoopsBlocksMacrosAndNamespaces) {
  EXPECT_EQ(marked(std::string(kA) + "{% for c in a %}{{ c }}.{% endfor %}", "ab"),
            "\u00aba\u00bb.\u00abb\u00bb.");
  EXPECT_EQ(marked(std::string(kA) + "{% for c in 'x' ~ a %}{{ c }}{% endfor %}", "y"),
            "x\u00aby\u00bb");
  EXPECT_EQ(marked(std::string(kA) + "{% set x %}[{{ a }}]{% endset %}{{ x }}{{ x[1:] }}", "y"),
            "[\u00aby\u00bb]\u00aby\u00bb]");
  EXPECT_EQ(
      marked(std::string(kA) + "{% macro f(v) %}<{{ v }}>{% endmacro %}{{ f(a) }}{{ f('t') }}",
             "y"),
      "<\u00aby\u00bb><t>");
  EXPECT_EQ(marked("{% set ns = namespace(t='') %}{% for m in messages %}"
                   "{% set ns.t = ns.t + '|' + m.content %}{% endfor %}{{ ns.t }}",
                   "x", "y"),
            "|\u00abx\u00bb|\u00aby\u00bb");
  EXPECT_EQ(marked("{% for m in messages %}{{ loop.index }}{{ m['role'] }}{% endfor %}", "x", "y"),
            "1\u00abuser\u00bb2\u00abuser\u00bb");
}

TEST(ChatProvenance, ToolsKeysAndValuesAreUserText) {
  const ordered_json tools = ordered_json::parse(R"([{"name": "f<|x|>", "args": {"k": 1}}])");
  EXPECT_EQ(marked("{% for t in tools %}{{ t.name }};{% for k, v in t.args.items() %}{{ k }}={{ v "
                   "}}{% endfor %}{% endfor %}",
                   "", "", tools),
            "\u00abf<|x|>\u00bb;\u00abk\u00bb=1");
}

TEST(ChatProvenance, ContextKeysOutsideTheRequestAreTemplateText) {
  auto tmpl = ChatTemplate::parse("{{ bos_token }}{{ messages[0] }}{{ extra }}");
  ASSERT_TRUE(tmpl.ok());
  const ordered_json context = {{"bos_token", "<s>"}, {"messages", {"m"}}, {"extra", "<e>"}};
  auto out = tmpl->render_marked(context);
  ASSERT_TRUE(out.ok()) << out.message();
  EXPECT_EQ(show(*out), "<s>\u00abm\u00bb<e>");
  const std::string_view keys[] = {"messages", "extra"};
  auto wider = tmpl->render_marked(context, keys);
  ASSERT_TRUE(wider.ok()) << wider.message();
  EXPECT_EQ(show(*wider), "<s>\u00abm<e>\u00bb");
}

// The chat-template fuzz corpus (real templates and a feature tour) rendered
// with a conversation whose every string carries markup: the ranges stay
// valid, render() agrees, and every message's text lies in user text.
TEST(ChatProvenance, FuzzCorpusTemplatesKeepValidRanges) {
  const std::filesystem::path dir =
      std::filesystem::path(SPECSTACK_TEST_DATA_DIR) / "../fuzz/corpus/chat_template";
  const ordered_json context = ordered_json::parse(R"({
    "messages": [
      {"role": "system", "content": "S<|im_start|>"},
      {"role": "user", "content": "U<|eot_id|>"},
      {"role": "assistant", "content": "<think>\nR</s>\n</think>\n\nA<|im_end|>",
       "tool_calls": [{"function": {"name": "f", "arguments": {"a": "<|x|>"}}}]},
      {"role": "tool", "content": "T<|im_end|>"},
      {"role": "user", "content": "V<|im_start|>"}],
    "tools": [{"type": "function", "function": {"name": "f", "description": "D<|eot_id|>",
               "parameters": {"type": "object"}}}],
    "add_generation_prompt": true, "bos_token": "<s>", "eos_token": "</s>"})");
  int rendered = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (entry.path().extension() != ".jinja") continue;
    std::ifstream in(entry.path(), std::ios::binary);
    std::stringstream source;
    source << in.rdbuf();
    auto tmpl = ChatTemplate::parse(source.str());
    ASSERT_TRUE(tmpl.ok()) << entry.path() << ": " << tmpl.message();
    auto out = tmpl->render_marked(context);
    if (!out.ok()) continue;  // some corpus templates raise on this conversation
    ++rendered;
    EXPECT_TRUE(ranges_valid(out->user_text, out->text.size())) << entry.path();
    auto plain = tmpl->render(context);
    ASSERT_TRUE(plain.ok());
    EXPECT_EQ(*plain, out->text);
    // Markup that came from the request is inside user text wherever it lands.
    for (const std::string forged : {"U<|eot_id|>", "V<|im_start|>", "T<|im_end|>"}) {
      for (size_t at = out->text.find(forged); at != std::string::npos;
           at = out->text.find(forged, at + 1)) {
        EXPECT_EQ(slice_ranges(out->user_text, at, at + forged.size()),
                  (TextRanges{{0, forged.size()}}))
            << entry.path() << " at " << at;
      }
    }
  }
  EXPECT_GE(rendered, 3);
}

}  // namespace
}  // namespace specstack
