// CompletionSession with tools, on scripted engine streams (a byte-level
// tokenizer, so the text is exact): the SSE sequence of a streamed answer
// with text before two calls (content deltas, then per call an opening
// delta and argument pieces, then finish_reason "tool_calls" on a chunk of
// its own), the same answer whole, n = 2 with one choice calling and one
// not, and a malformed call that ends as content with "stop".
#include <gtest/gtest.h>

#include "fake_engine.h"
#include "server/completion_session.h"
#include "test_util.h"

namespace specstack {
namespace {

using testing::FakeStream;
using testing::token_events;
using namespace std::chrono_literals;

class ToolCallSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto loaded = Tokenizer::load_dir(testing::test_data("grammar/json-bytes-512"));
    ASSERT_TRUE(loaded.ok()) << loaded.message();
    tokenizer_ = std::make_unique<Tokenizer>(std::move(loaded).value());
  }

  SessionOptions options(bool stream, int32_t n = 1) const {
    SessionOptions options;
    options.header = {ApiEndpoint::kApiChatCompletions, "chatcmpl-1", 1, "tiny"};
    options.n = n;
    options.stream = stream;
    options.tool_calls = ToolCallFormat::kToolCallHermes;
    return options;
  }

  std::shared_ptr<FakeStream> stream_of(const std::vector<std::string>& texts) const {
    std::vector<RequestEvent> events;
    for (size_t c = 0; c < texts.size(); ++c) {
      for (RequestEvent& e : token_events(int32_t(c), tokenizer_->encode(texts[c], false),
                                          FinishReason::kFinishStop)) {
        events.push_back(std::move(e));
      }
    }
    return std::make_shared<FakeStream>(int32_t(texts.size()), std::move(events), RequestStats{},
                                        false);
  }

  std::vector<OrderedJson> run_stream(CompletionSession& session) const {
    std::string text;
    for (int i = 0; i < 10000 && !session.finished(); ++i) text += session.poll_stream(1ms);
    EXPECT_TRUE(session.finished());
    std::vector<OrderedJson> events;
    for (size_t at = 0; at < text.size();) {
      const size_t end = text.find("\n\n", at);
      const std::string data = text.substr(at + 6, end - at - 6);
      events.push_back(data == "[DONE]" ? OrderedJson("[DONE]") : OrderedJson::parse(data));
      at = end + 2;
    }
    return events;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
};

const std::string kAnswer =
    "Checking both.\n<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \"Paris\", "
    "\"days\": [1, 2, 3], \"note\": \"a fairly long argument string\"}}\n</tool_call>\n"
    "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 2, \"b\": 3}}\n</tool_call>";

TEST_F(ToolCallSessionTest, StreamedCallsFollowTheText) {
  CompletionSession session(*tokenizer_, options(true), stream_of({kAnswer}));
  const std::vector<OrderedJson> events = run_stream(session);
  ASSERT_GE(events.size(), 6u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string content;
  std::vector<std::string> names, ids, arguments;
  std::optional<std::string> finish;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    const OrderedJson& choice = events[i]["choices"][0];
    EXPECT_FALSE(finish.has_value()) << "a chunk after the finish";
    if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
    const OrderedJson& delta = choice["delta"];
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (!delta.contains("tool_calls")) continue;
    EXPECT_TRUE(choice["finish_reason"].is_null());
    const OrderedJson& call = delta["tool_calls"][0];
    const size_t index = call["index"];
    if (call.contains("id")) {
      EXPECT_EQ(index, ids.size());
      ids.push_back(call["id"]);
      names.push_back(call["function"]["name"]);
      arguments.push_back(call["function"]["arguments"]);
    } else {
      ASSERT_LT(index, arguments.size());
      arguments[index] += call["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(content, "Checking both.\n");
  EXPECT_EQ(finish, "tool_calls");
  ASSERT_EQ(names, (std::vector<std::string>{"weather", "add"}));
  EXPECT_NE(ids[0], ids[1]);
  EXPECT_EQ(arguments[0],
            R"({"city":"Paris","days":[1,2,3],"note":"a fairly long argument string"})");
  EXPECT_EQ(arguments[1], R"({"a":2,"b":3})");
}

TEST_F(ToolCallSessionTest, WholeAnswersPerChoice) {
  CompletionSession session(*tokenizer_, options(false, 3),
                            stream_of({kAnswer, "Just text.", "<tool_call>\n{\"name\": oops}"}));
  for (int i = 0; i < 10000 && !session.finished(); ++i) session.poll(1ms);
  ASSERT_TRUE(session.finished());
  const OrderedJson body = session.response();
  const OrderedJson& calling = body["choices"][0];
  EXPECT_EQ(calling["finish_reason"], "tool_calls");
  EXPECT_EQ(calling["message"]["content"], "Checking both.");
  ASSERT_EQ(calling["message"]["tool_calls"].size(), 2u);
  EXPECT_EQ(calling["message"]["tool_calls"][1]["function"]["arguments"], R"({"a":2,"b":3})");
  const OrderedJson& text = body["choices"][1];
  EXPECT_EQ(text["finish_reason"], "stop");
  EXPECT_EQ(text["message"]["content"], "Just text.");
  EXPECT_FALSE(text["message"].contains("tool_calls"));
  const OrderedJson& malformed = body["choices"][2];
  EXPECT_EQ(malformed["finish_reason"], "stop");
  EXPECT_EQ(malformed["message"]["content"], "<tool_call>\n{\"name\": oops}");
  EXPECT_FALSE(malformed["message"].contains("tool_calls"));
}

// Argument fragments go out as the tokens arrive, before the choice ends,
// and the fragments of the stream reassemble to the whole message's calls.
TEST_F(ToolCallSessionTest, ArgumentsStreamBeforeTheEndAndMatchTheWholeMessage) {
  const std::vector<int32_t> tokens = tokenizer_->encode(kAnswer, false);
  std::vector<RequestEvent> events = token_events(0, tokens, FinishReason::kFinishStop);
  // Hold back the tail: the engine is still generating the second call.
  const size_t held = 40;
  std::vector<RequestEvent> tail(events.end() - held, events.end());
  events.resize(events.size() - held);
  auto fake = std::make_shared<FakeStream>(1, std::move(events), RequestStats{}, false);
  CompletionSession session(*tokenizer_, options(true), fake);
  std::string early;
  for (int i = 0; i < 20; ++i) early += session.poll_stream(1ms);
  EXPECT_FALSE(session.finished());
  // Several fragments of the first call's arguments are out already.
  size_t fragments = 0;
  for (size_t at = early.find("\"arguments\":\""); at != std::string::npos;
       at = early.find("\"arguments\":\"", at + 1)) {
    if (early.compare(at, 15, "\"arguments\":\"\"") != 0) ++fragments;
  }
  EXPECT_GT(fragments, 5u);
  for (RequestEvent& e : tail) fake->push(std::move(e));
  std::string text = early;
  for (int i = 0; i < 10000 && !session.finished(); ++i) text += session.poll_stream(1ms);
  ASSERT_TRUE(session.finished());

  std::vector<std::string> names, arguments;
  for (size_t at = 0; at < text.size();) {
    const size_t end = text.find("\n\n", at);
    const std::string data = text.substr(at + 6, end - at - 6);
    at = end + 2;
    if (data == "[DONE]") break;
    const OrderedJson delta = OrderedJson::parse(data)["choices"][0]["delta"];
    if (!delta.contains("tool_calls")) continue;
    const OrderedJson& call = delta["tool_calls"][0];
    const size_t index = call["index"];
    if (call.contains("id")) {
      names.push_back(call["function"]["name"]);
      arguments.emplace_back();
    }
    ASSERT_LT(index, arguments.size());
    arguments[index] += call["function"]["arguments"].get<std::string>();
  }

  CompletionSession whole(*tokenizer_, options(false), stream_of({kAnswer}));
  for (int i = 0; i < 10000 && !whole.finished(); ++i) whole.poll(1ms);
  const OrderedJson calls = whole.response()["choices"][0]["message"]["tool_calls"];
  ASSERT_EQ(calls.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(calls[i]["function"]["name"], names[i]);
    EXPECT_EQ(calls[i]["function"]["arguments"], arguments[i]);
  }
}

}  // namespace
}  // namespace specstack
