// Response, SSE chunk and error JSON shapes, compared field by field with
// what the OpenAI API returns.
#include "server/openai_response.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "server/errors.h"

namespace specstack {
namespace {

ResponseHeader header_for(ApiEndpoint endpoint) {
  ResponseHeader header;
  header.endpoint = endpoint;
  header.id = endpoint == ApiEndpoint::kApiChatCompletions ? "chatcmpl-1" : "cmpl-1";
  header.created = 1700000000;
  header.model = "tiny";
  return header;
}

TEST(OpenAiResponse, UsageTimingInMilliseconds) {
  UsageCounts usage;
  usage.timing.queue_ms = 1.23456;
  usage.timing.ttft_ms = 20.5;
  usage.timing.total_ms = 100;
  const OrderedJson timing = usage_json(usage)["timing"];
  EXPECT_EQ(json_text(timing), R"({"queue_ms":1.235,"ttft_ms":20.5,"total_ms":100.0})");
}

TEST(OpenAiResponse, FinishReasonsOfEarlyEnds) {
  EXPECT_STREQ(finish_reason_name(FinishReason::kFinishTimeout), "timeout");
  EXPECT_STREQ(finish_reason_name(FinishReason::kFinishShutdown), "shutdown");
}

TEST(OpenAiResponse, CompletionBody) {
  ChoiceOutput choice;
  choice.index = 0;
  choice.text = "Once upon";
  choice.finish = FinishReason::kFinishLength;
  UsageCounts usage{5, 2, 3};
  const OrderedJson body =
      completion_response(header_for(ApiEndpoint::kApiCompletions), {choice}, usage, false);
  EXPECT_EQ(
      json_text(body),
      R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"tiny",)"
      R"("choices":[{"index":0,"text":"Once upon","logprobs":null,"finish_reason":"length"}],)"
      R"("usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7,)"
      R"("prompt_tokens_details":{"cached_tokens":3},)"
      R"("timing":{"queue_ms":null,"ttft_ms":null,"total_ms":null}}})");
}

TEST(OpenAiResponse, ChatBodyWithTwoChoices) {
  ChoiceOutput first, second;
  first.index = 0;
  first.text = "Hi";
  first.finish = FinishReason::kFinishStop;
  second.index = 1;
  second.text = "Hello";
  second.finish = FinishReason::kFinishLength;
  const OrderedJson body = completion_response(header_for(ApiEndpoint::kApiChatCompletions),
                                               {first, second}, UsageCounts{4, 6, 0}, false);
  EXPECT_EQ(body["object"], "chat.completion");
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][0]["message"], OrderedJson({{"role", "assistant"}, {"content", "Hi"}}));
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["choices"][1]["index"], 1);
  EXPECT_EQ(body["choices"][1]["message"]["content"], "Hello");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["total_tokens"], 10);
  EXPECT_FALSE(body["choices"][0].contains("text"));
}

TEST(OpenAiResponse, ChatChunks) {
  const ResponseHeader header = header_for(ApiEndpoint::kApiChatCompletions);
  ChoiceOutput opening;
  opening.first_chunk = true;
  EXPECT_EQ(json_text(stream_chunk(header, opening, false, false)),
            R"({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1700000000,)"
            R"("model":"tiny","choices":[{"index":0,"delta":{"role":"assistant","content":""},)"
            R"("logprobs":null,"finish_reason":null}]})");
  ChoiceOutput text;
  text.index = 1;
  text.text = " upon";
  const OrderedJson text_chunk = stream_chunk(header, text, false, /*with_null_usage=*/true);
  EXPECT_EQ(text_chunk["choices"][0]["delta"], OrderedJson({{"content", " upon"}}));
  EXPECT_EQ(text_chunk["choices"][0]["index"], 1);
  ASSERT_TRUE(text_chunk.contains("usage"));
  EXPECT_TRUE(text_chunk["usage"].is_null());
  ChoiceOutput finish;
  finish.finish = FinishReason::kFinishStop;
  const OrderedJson finish_chunk = stream_chunk(header, finish, false, false);
  EXPECT_EQ(finish_chunk["choices"][0]["delta"], OrderedJson::object());
  EXPECT_EQ(finish_chunk["choices"][0]["finish_reason"], "stop");
  EXPECT_FALSE(finish_chunk.contains("usage"));
}

TEST(OpenAiResponse, CompletionChunkAndUsageChunk) {
  const ResponseHeader header = header_for(ApiEndpoint::kApiCompletions);
  ChoiceOutput delta;
  delta.text = "time";
  EXPECT_EQ(json_text(stream_chunk(header, delta, false, false)),
            R"({"id":"cmpl-1","object":"text_completion","created":1700000000,"model":"tiny",)"
            R"("choices":[{"index":0,"text":"time","logprobs":null,"finish_reason":null}]})");
  const OrderedJson usage = usage_chunk(header, UsageCounts{3, 4, 1});
  EXPECT_EQ(usage["choices"], OrderedJson::array());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 4);
  EXPECT_EQ(usage["usage"]["total_tokens"], 7);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 1);
}

TEST(OpenAiResponse, CompletionLogprobsShape) {
  std::vector<TokenLogprobText> logprobs(2);
  logprobs[0].token = "Once";
  logprobs[0].logprob = -0.5f;
  logprobs[0].top = {{"Once", -0.5f}, {"The", -1.25f}};
  logprobs[1].token = " up";
  logprobs[1].logprob = -std::numeric_limits<float>::infinity();
  logprobs[1].top = {{" on", -0.25f}};
  const OrderedJson out = logprobs_json(ApiEndpoint::kApiCompletions, logprobs, 10);
  EXPECT_EQ(out["tokens"], OrderedJson({"Once", " up"}));
  EXPECT_EQ(out["token_logprobs"], OrderedJson({-0.5, -9999.0}));
  EXPECT_EQ(out["text_offset"], OrderedJson({10, 14}));
  // A dict per token; the sampled token is always in it.
  EXPECT_EQ(out["top_logprobs"][0], OrderedJson({{"Once", -0.5}, {"The", -1.25}}));
  EXPECT_EQ(out["top_logprobs"][1], OrderedJson({{" up", -9999.0}, {" on", -0.25}}));
}

TEST(OpenAiResponse, ChatLogprobsShape) {
  std::vector<TokenLogprobText> logprobs(1);
  logprobs[0].token = "\xC3\xA9";
  logprobs[0].logprob = -0.125f;
  logprobs[0].top = {{"\xC3\xA9", -0.125f}, {"e", -2.5f}};
  const OrderedJson out = logprobs_json(ApiEndpoint::kApiChatCompletions, logprobs, 0);
  ASSERT_EQ(out["content"].size(), 1u);
  const OrderedJson& entry = out["content"][0];
  EXPECT_EQ(entry["token"], "\xC3\xA9");
  EXPECT_EQ(entry["logprob"], -0.125);
  EXPECT_EQ(entry["bytes"], OrderedJson({195, 169}));
  ASSERT_EQ(entry["top_logprobs"].size(), 2u);
  EXPECT_EQ(entry["top_logprobs"][1],
            OrderedJson({{"token", "e"}, {"logprob", -2.5}, {"bytes", {101}}}));
}

TEST(OpenAiResponse, LogprobsOnlyWhenRequested) {
  ChoiceOutput choice;
  choice.text = "a";
  choice.logprobs.resize(1);
  choice.logprobs[0].token = "a";
  const OrderedJson with =
      completion_response(header_for(ApiEndpoint::kApiCompletions), {choice}, UsageCounts{}, true);
  EXPECT_EQ(with["choices"][0]["logprobs"]["tokens"], OrderedJson({"a"}));
  const OrderedJson without =
      completion_response(header_for(ApiEndpoint::kApiCompletions), {choice}, UsageCounts{}, false);
  EXPECT_TRUE(without["choices"][0]["logprobs"].is_null());
}

TEST(OpenAiResponse, SseFraming) {
  EXPECT_EQ(sse_event(OrderedJson({{"a", 1}})), "data: {\"a\":1}\n\n");
  EXPECT_EQ(kSseDone, "data: [DONE]\n\n");
  // Invalid UTF-8 never makes it to the wire, and never throws.
  EXPECT_EQ(sse_event(OrderedJson({{"t", std::string("a\xFF")}})),
            "data: {\"t\":\"a\xEF\xBF\xBD\"}\n\n");
}

TEST(OpenAiErrors, ShapeAndStatusMapping) {
  EXPECT_EQ(http_status_for(ErrorCode::kErrorInvalidArgument), 400);
  EXPECT_EQ(http_status_for(ErrorCode::kErrorNotFound), 404);
  EXPECT_EQ(http_status_for(ErrorCode::kErrorResourceExhausted), 429);
  EXPECT_EQ(http_status_for(ErrorCode::kErrorInternal), 500);

  const ApiError busy =
      api_error_from(make_error("queue full", ErrorCode::kErrorResourceExhausted));
  EXPECT_EQ(busy.status, 429);
  EXPECT_EQ(busy.retry_after_seconds, 1);
  const OrderedJson body = OrderedJson::parse(error_body(busy));
  EXPECT_EQ(body,
            OrderedJson::parse(R"({"error": {"message": "queue full", "type": "rate_limit_error",
                                            "param": null, "code": null}})"));

  ApiError auth = make_api_error(401, "Incorrect API key provided", "invalid_api_key");
  auth.param = "authorization";
  EXPECT_EQ(error_body(auth),
            R"({"error":{"message":"Incorrect API key provided","type":"authentication_error",)"
            R"("param":"authorization","code":"invalid_api_key"}})");
  const ApiError bad = api_error_from(errorf("'n' must be in [1, 128], got {}", 0));
  EXPECT_EQ(bad.status, 400);
  EXPECT_EQ(bad.retry_after_seconds, 0);
  EXPECT_EQ(OrderedJson::parse(error_body(bad))["error"]["type"], "invalid_request_error");
  // Client bytes quoted in a message cannot break the body.
  EXPECT_NO_THROW(OrderedJson::parse(error_body(make_api_error(400, std::string("bad \xC3")))));
}

}  // namespace
}  // namespace specstack
