// CompletionSession against scripted engine streams: detokenized text, stop
// strings (cut, finish "stop", engine request cancelled), n > 1, logprobs,
// usage, and the SSE sequence ending in [DONE].
#include "server/completion_session.h"

#include <gtest/gtest.h>

#include "fake_engine.h"
#include "server_test_util.h"

namespace specstack {
namespace {

using testing::FakeStream;
using testing::token_events;
using namespace std::chrono_literals;

class CompletionSessionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = testing::load_tinystories_tokenizer();
    ASSERT_NE(tokenizer_, nullptr);
  }

  std::vector<int32_t> ids(const std::string& text) const {
    return tokenizer_->encode(text, /*add_special_tokens=*/false);
  }

  SessionOptions options(ApiEndpoint endpoint, int32_t n = 1) const {
    SessionOptions options;
    options.header.endpoint = endpoint;
    options.header.id = "id-1";
    options.header.created = 1;
    options.header.model = "tiny";
    options.n = n;
    options.prompt_tokens = 4;
    return options;
  }

  static std::shared_ptr<FakeStream> make_stream(int32_t n, std::vector<RequestEvent> events,
                                                 int64_t cached = 0) {
    RequestStats stats;
    stats.cached_tokens = cached;
    return std::make_shared<FakeStream>(n, std::move(events), stats, false);
  }

  // Runs a non-streaming session to the end.
  static OrderedJson run(CompletionSession& session) {
    for (int i = 0; i < 1000 && !session.finished(); ++i) session.poll(1ms);
    EXPECT_TRUE(session.finished());
    return session.response();
  }

  // Runs a streaming session; returns the JSON of each data line ([DONE] as a string).
  static std::vector<OrderedJson> run_stream(CompletionSession& session) {
    std::string text;
    for (int i = 0; i < 1000 && !session.finished(); ++i) text += session.poll_stream(1ms);
    EXPECT_TRUE(session.finished());
    std::vector<OrderedJson> events;
    size_t at = 0;
    while (at < text.size()) {
      const size_t end = text.find("\n\n", at);
      EXPECT_NE(end, std::string::npos);
      if (end == std::string::npos) break;
      const std::string line = text.substr(at, end - at);
      EXPECT_EQ(line.rfind("data: ", 0), 0u) << line;
      const std::string data = line.substr(6);
      events.push_back(data == "[DONE]" ? OrderedJson("[DONE]") : OrderedJson::parse(data));
      at = end + 2;
    }
    return events;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
};

TEST_F(CompletionSessionTest, TextUsageAndFinish) {
  const std::vector<int32_t> tokens = ids("Once upon a time there was a cat");
  auto stream = make_stream(1, token_events(0, tokens, FinishReason::kFinishLength), 2);
  CompletionSession session(*tokenizer_, options(ApiEndpoint::kApiCompletions), stream);
  const OrderedJson body = run(session);
  EXPECT_EQ(body["choices"][0]["text"], tokenizer_->decode(tokens, true));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["prompt_tokens"], 4);
  EXPECT_EQ(body["usage"]["completion_tokens"], static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(body["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
  EXPECT_EQ(body["id"], "id-1");
  EXPECT_FALSE(stream->cancelled());  // the engine finished it: nothing to cancel
}

TEST_F(CompletionSessionTest, StopStringCutsTextAndCancels) {
  const std::vector<int32_t> tokens = ids("Once upon a time there was a cat");
  auto stream = make_stream(1, token_events(0, tokens, FinishReason::kFinishLength));
  SessionOptions opts = options(ApiEndpoint::kApiCompletions);
  opts.stop_strings = {" there"};
  CompletionSession session(*tokenizer_, opts, stream);
  const OrderedJson body = run(session);
  EXPECT_EQ(body["choices"][0]["text"], "Once upon a time");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_TRUE(stream->cancelled());
  // Tokens up to the one that completed the stop string count; later ones do not.
  const int64_t used = body["usage"]["completion_tokens"];
  EXPECT_LT(used, static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(tokenizer_->decode(std::vector<int32_t>(tokens.begin(), tokens.begin() + used), true)
                .find(" there"),
            std::string("Once upon a time").size());
}

TEST_F(CompletionSessionTest, StreamedDeltasAddUpAndHoldBackPartialStops) {
  const std::vector<int32_t> tokens = ids("Once upon a time there was a cat");
  auto stream = make_stream(1, token_events(0, tokens, FinishReason::kFinishStop));
  SessionOptions opts = options(ApiEndpoint::kApiCompletions);
  opts.stream = true;
  opts.stop_strings = {"there is"};  // a prefix ("there") appears, the stop never does
  CompletionSession session(*tokenizer_, opts, stream);
  const std::vector<OrderedJson> events = run_stream(session);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(events.back(), OrderedJson("[DONE]"));
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i) {
    text += events[i]["choices"][0]["text"].get<std::string>();
    EXPECT_FALSE(events[i].contains("usage"));
    const bool last = i + 2 == events.size();
    EXPECT_EQ(events[i]["choices"][0]["finish_reason"].is_null(), !last);
  }
  EXPECT_EQ(text, tokenizer_->decode(tokens, true));
  EXPECT_EQ(events[events.size() - 2]["choices"][0]["finish_reason"], "stop");
}

TEST_F(CompletionSessionTest, ChatStreamWithUsage) {
  const std::vector<int32_t> tokens = ids("Hello there");
  auto stream = make_stream(1, token_events(0, tokens, FinishReason::kFinishStop), 3);
  SessionOptions opts = options(ApiEndpoint::kApiChatCompletions);
  opts.stream = true;
  opts.include_usage = true;
  CompletionSession session(*tokenizer_, opts, stream);
  const std::vector<OrderedJson> events = run_stream(session);
  ASSERT_GE(events.size(), 4u);
  // Role first, content deltas, the finish, the usage chunk, [DONE].
  EXPECT_EQ(events[0]["choices"][0]["delta"],
            OrderedJson({{"role", "assistant"}, {"content", ""}}));
  EXPECT_EQ(events[0]["object"], "chat.completion.chunk");
  std::string text;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    EXPECT_TRUE(events[i]["usage"].is_null());
    ASSERT_EQ(events[i]["choices"].size(), 1u);
    const OrderedJson& delta = events[i]["choices"][0]["delta"];
    if (i > 0) {
      EXPECT_FALSE(delta.contains("role"));
    }
    if (delta.contains("content")) text += delta["content"].get<std::string>();
  }
  EXPECT_EQ(text, tokenizer_->decode(tokens, true));
  EXPECT_EQ(events[events.size() - 3]["choices"][0]["finish_reason"], "stop");
  const OrderedJson& usage_chunk = events[events.size() - 2];
  EXPECT_EQ(usage_chunk["choices"], OrderedJson::array());
  EXPECT_EQ(usage_chunk["usage"]["completion_tokens"], static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(usage_chunk["usage"]["prompt_tokens_details"]["cached_tokens"], 3);
  EXPECT_EQ(events.back(), OrderedJson("[DONE]"));
}

TEST_F(CompletionSessionTest, StopInOneOfTwoChoicesLetsTheOtherFinish) {
  const std::vector<int32_t> first = ids("Once upon a time there was");
  const std::vector<int32_t> second = ids("The dog ran home");
  auto stream = make_stream(2, {});
  SessionOptions opts = options(ApiEndpoint::kApiCompletions, 2);
  opts.stop_strings = {" a time"};
  CompletionSession session(*tokenizer_, opts, stream);
  for (const RequestEvent& event : token_events(0, first, FinishReason::kFinishLength)) {
    stream->push(event);
  }
  for (int i = 0; i < 50; ++i) session.poll(1ms);
  EXPECT_FALSE(session.finished());
  EXPECT_FALSE(stream->cancelled());  // choice 1 still runs
  for (const RequestEvent& event : token_events(1, second, FinishReason::kFinishLength)) {
    stream->push(event);
  }
  const OrderedJson body = run(session);
  EXPECT_EQ(body["choices"][0]["text"], "Once upon");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["choices"][1]["text"], tokenizer_->decode(second, true));
  EXPECT_EQ(body["choices"][1]["finish_reason"], "length");
  EXPECT_FALSE(stream->cancelled());  // both choices ended in the engine
}

TEST_F(CompletionSessionTest, AllChoicesStoppedCancelsTheEngineRequest) {
  auto stream = make_stream(2, {});
  SessionOptions opts = options(ApiEndpoint::kApiCompletions, 2);
  opts.stop_strings = {"upon"};
  CompletionSession session(*tokenizer_, opts, stream);
  const std::vector<int32_t> tokens = ids("Once upon a time");
  for (int32_t choice = 0; choice < 2; ++choice) {
    RequestEvent event;
    event.choice = choice;
    event.tokens = tokens;  // no finish: the engine would go on
    stream->push(event);
  }
  const OrderedJson body = run(session);
  EXPECT_EQ(stream->n_cancel_calls(), 1);
  EXPECT_EQ(body["choices"][0]["text"], "Once ");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "stop");
}

TEST_F(CompletionSessionTest, LogprobsFollowTheTokens) {
  const std::vector<int32_t> tokens = ids("Once upon");
  std::vector<RequestEvent> events = token_events(0, tokens, FinishReason::kFinishLength);
  for (RequestEvent& event : events) {
    for (int32_t token : event.tokens) {
      TokenLogprob logprob;
      logprob.token = token;
      logprob.logprob = -0.5f;
      logprob.top = {{token, -0.5f}, {5, -1.0f}, {6, -2.0f}};
      event.logprobs.push_back(logprob);
    }
  }
  auto stream = make_stream(1, std::move(events));
  SessionOptions opts = options(ApiEndpoint::kApiCompletions);
  opts.top_logprobs = 2;
  CompletionSession session(*tokenizer_, opts, stream);
  const OrderedJson logprobs = run(session)["choices"][0]["logprobs"];
  ASSERT_EQ(logprobs["tokens"].size(), tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(logprobs["tokens"][i], tokenizer_->decode(std::vector<int32_t>{tokens[i]}));
    EXPECT_EQ(logprobs["token_logprobs"][i], -0.5);
    EXPECT_LE(logprobs["top_logprobs"][i].size(), 2u);  // the sampled token and one more
  }
  EXPECT_EQ(logprobs["text_offset"][0], 0);
}

TEST_F(CompletionSessionTest, EngineAbortIsReportedAndNothingHangs) {
  auto stream = make_stream(1, token_events(0, ids("Once"), FinishReason::kFinishAbort));
  CompletionSession session(*tokenizer_, options(ApiEndpoint::kApiCompletions), stream);
  EXPECT_EQ(run(session)["choices"][0]["finish_reason"], "abort");
}

TEST_F(CompletionSessionTest, DestroyingAnUnfinishedSessionCancels) {
  auto stream = make_stream(1, {});
  {
    CompletionSession session(*tokenizer_, options(ApiEndpoint::kApiCompletions), stream);
    session.poll(1ms);
    EXPECT_FALSE(session.finished());
  }
  EXPECT_TRUE(stream->cancelled());
}

}  // namespace
}  // namespace specstack
