// Forced tool calls (tool_choice "required" or a named function) through the
// whole server path — request parsing, the tool-call grammar, the engine,
// CompletionSession's parsing — on the llama-gqa golden model (random
// weights: it knows nothing of tools) with the 512-token byte-level
// tokenizer, under the Qwen3 template (Hermes <tool_call>) and a Llama-3.1
// style JSON template. Every answer must parse into tool_calls whose
// arguments validate against the function's parameters by
// tests/grammar/schema_check.h (which reads the schema, not the grammar).
// ("note" is not strict but closes its object itself: a non-strict object
// lets a random model add keys until max_tokens; json_schema_test covers
// that grammar.)
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "backend/cpu/cpu_backend.h"
#include "engine/engine.h"
#include "engine/golden_run.h"
#include "grammar/schema_check.h"
#include "server/completion_session.h"
#include "server/openai_request.h"
#include "server/structured_output.h"
#include "test_util.h"

namespace specstack {
namespace {

using namespace std::chrono_literals;
using Json = nlohmann::ordered_json;

const char* kTools = R"([
  {"type": "function", "function": {"name": "get_weather", "description": "Weather of a city",
   "strict": true,
   "parameters": {"type": "object", "properties": {
     "city": {"type": "string", "maxLength": 12}, "unit": {"enum": ["c", "f"]}},
     "required": ["city"]}}},
  {"type": "function", "function": {"name": "add", "strict": true,
   "parameters": {"type": "object", "properties": {
     "a": {"type": "integer", "minimum": -5, "maximum": 250}, "b": {"type": "number"},
     "flags": {"type": "array", "items": {"type": "boolean"}, "maxItems": 3}},
     "required": ["a", "b"]}}},
  {"type": "function", "function": {"name": "note",
   "parameters": {"type": "object", "properties": {"text": {"type": "string", "maxLength": 8}},
     "required": ["text"], "additionalProperties": false}}}
])";

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

struct Fixture {
  CpuBackend backend;
  std::unique_ptr<ModelInstance> model;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<GrammarCache> grammars;
  std::unique_ptr<ChatTemplate> qwen, llama;
  ServedModel served_qwen, served_llama;
};

Fixture& fixture() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    ModelInstanceOptions options;
    options.kv_tokens = 64 * 1024;
    fx->model = testing::load_golden_model("llama-gqa", fx->backend, options);
    auto tok = Tokenizer::load_dir(testing::test_data("grammar/json-bytes-512"));
    SS_CHECK_MSG(tok.ok(), tok.ok() ? "" : tok.message());
    fx->tokenizer = std::make_unique<Tokenizer>(std::move(tok).value());
    fx->grammars = std::make_unique<GrammarCache>(*fx->tokenizer);
    const Json qwen_config =
        Json::parse(read_file(testing::test_data("golden/tokenizers/qwen3/tokenizer_config.json")));
    const std::string qwen_source = qwen_config["chat_template"];
    const std::string llama_source =
        read_file(testing::test_data("tools/llama3.1-json-tools.jinja"));
    fx->qwen = std::make_unique<ChatTemplate>(ChatTemplate::parse(qwen_source).value());
    fx->llama = std::make_unique<ChatTemplate>(ChatTemplate::parse(llama_source).value());
    for (auto [served, tmpl, source] :
         {std::tuple{&fx->served_qwen, fx->qwen.get(), &qwen_source},
          std::tuple{&fx->served_llama, fx->llama.get(), &llama_source}}) {
      served->tokenizer = fx->tokenizer.get();
      served->chat_template = tmpl;
      served->name = "tiny";
      served->max_context = 4096;
      served->vocab_size = fx->tokenizer->vocab_size();
      served->grammars = fx->grammars.get();
      served->tool_format = detect_tool_call_format(*source).value();
    }
    return fx;
  }();
  return *f;
}

const Json* tool_schema(const Json& tools, const std::string& name, bool* strict) {
  for (const Json& tool : tools) {
    if (tool["function"]["name"] == name) {
      *strict = tool["function"].value("strict", false);
      return &tool["function"]["parameters"];
    }
  }
  return nullptr;
}

TEST(ToolCallGeneration, SixtyForcedCallsAllParseAndValidate) {
  Fixture& f = fixture();
  Engine engine(*f.model, EngineOptions{});
  const Json tools = Json::parse(kTools);
  const char* names[] = {"get_weather", "add", "note"};
  struct Pending {
    int i;
    bool qwen, named, parallel;
    std::unique_ptr<CompletionSession> session;
  };
  std::vector<Pending> pending;
  for (int i = 0; i < 60; ++i) {
    const bool qwen = i % 2 == 0;
    const bool named = i % 3 == 0;
    const bool parallel = i % 4 != 1;
    Json body = {{"messages", {{{"role", "user"}, {"content", "Weather in Paris? And 2+2."}}}},
                 {"tools", tools},
                 {"parallel_tool_calls", parallel},
                 {"max_tokens", 600},
                 {"seed", i},
                 {"temperature", i % 5 == 0 ? 0.0 : (i % 3 == 1 ? 1.5 : 0.9)}};
    body["tool_choice"] =
        named ? Json{{"type", "function"}, {"function", {{"name", names[(i / 3) % 3]}}}}
              : Json("required");
    std::string param;
    auto request = parse_openai_request(ApiEndpoint::kApiChatCompletions, body.dump(),
                                        qwen ? f.served_qwen : f.served_llama, &param);
    ASSERT_TRUE(request.ok()) << request.message() << " (param " << param << ")";
    ASSERT_NE(request->options.constraint, nullptr);
    ResponseHeader header{ApiEndpoint::kApiChatCompletions, "chatcmpl-test", 0, "tiny"};
    SessionOptions session_options = session_options_for(*request, header);
    auto stream = engine.submit(request->options);
    ASSERT_TRUE(stream.ok()) << stream.message();
    pending.push_back(
        {i, qwen, named, parallel,
         std::make_unique<CompletionSession>(*f.tokenizer, session_options, *stream)});
  }
  int n_checked = 0, n_parallel_many = 0;
  for (Pending& p : pending) {
    const int i = p.i;
    const bool qwen = p.qwen, named = p.named, parallel = p.parallel;
    CompletionSession& session = *p.session;
    while (!session.finished()) session.poll(100ms);
    const Json response = Json::parse(json_text(session.response()));
    const Json& choice = response["choices"][0];
    SCOPED_TRACE(response.dump());
    EXPECT_EQ(choice["finish_reason"], "tool_calls");
    const Json& message = choice["message"];
    EXPECT_TRUE(message["content"].is_null());
    ASSERT_TRUE(message.contains("tool_calls"));
    const Json& calls = message["tool_calls"];
    ASSERT_GE(calls.size(), 1u);
    if (!parallel || !qwen) {
      EXPECT_EQ(calls.size(), 1u);
    }
    n_parallel_many += calls.size() > 1;
    for (const Json& call : calls) {
      EXPECT_EQ(call["type"], "function");
      EXPECT_EQ(call["id"].get<std::string>().rfind("call_", 0), 0u);
      const std::string name = call["function"]["name"];
      if (named) {
        EXPECT_EQ(name, names[(i / 3) % 3]);
      }
      bool strict = true;
      const Json* schema = tool_schema(tools, name, &strict);
      ASSERT_NE(schema, nullptr) << name;
      const Json args =
          Json::parse(call["function"]["arguments"].get<std::string>(), nullptr, false);
      ASSERT_TRUE(args.is_object());
      std::string why;
      EXPECT_TRUE(testing::schema_valid(args, *schema, *schema, &why, 0, strict)) << why;
      ++n_checked;
    }
  }
  EXPECT_GE(n_checked, 60);
  // Random weights pick "another call" now and then: the parallel path ran.
  EXPECT_GT(n_parallel_many, 0);
}

}  // namespace
}  // namespace specstack
