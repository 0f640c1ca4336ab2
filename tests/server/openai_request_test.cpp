// Request parsing and validation: every malformed input named in the issue
// gets the right error kind (400 vs 404) and a message naming the field.
#include "server/openai_request.h"

#include <gtest/gtest.h>

#include <random>

#include "server/chat_prompt.h"
#include "server/errors.h"
#include "server_test_util.h"

namespace specstack {
namespace {

using testing::load_tinystories_tokenizer;

class CompletionRequestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    tokenizer_ = load_tinystories_tokenizer();
    ASSERT_NE(tokenizer_, nullptr);
    model_.tokenizer = tokenizer_.get();
    model_.name = "tiny";
    model_.max_context = 64;
    model_.vocab_size = tokenizer_->vocab_size();
    model_.chat_template_error = "its tokenizer_config.json has no chat_template";
  }

  Result<OpenAiRequest> parse(const std::string& body,
                              ApiEndpoint endpoint = ApiEndpoint::kApiCompletions) {
    return parse_openai_request(endpoint, body, model_);
  }

  // The request fails with a 400 whose message contains `needle`.
  void expect_400(const std::string& body, const std::string& needle,
                  ApiEndpoint endpoint = ApiEndpoint::kApiCompletions) {
    auto result = parse(body, endpoint);
    ASSERT_FALSE(result.ok()) << body;
    EXPECT_EQ(http_status_for(result.error().code), 400) << body;
    EXPECT_NE(result.message().find(needle), std::string::npos)
        << body << "\n  message: " << result.message() << "\n  expected: " << needle;
  }

  std::unique_ptr<Tokenizer> tokenizer_;
  ServedModel model_;
};

TEST_F(CompletionRequestTest, StringPromptWithDefaults) {
  auto request = parse(R"({"model": "tiny", "prompt": "Once upon a time"})");
  ASSERT_TRUE(request.ok()) << request.message();
  EXPECT_EQ(request->options.prompt, tokenizer_->encode("Once upon a time", true));
  EXPECT_EQ(request->options.params.max_tokens, 16);
  EXPECT_FLOAT_EQ(request->options.params.temperature, 1.0f);
  EXPECT_EQ(request->options.n, 1);
  EXPECT_EQ(request->options.top_logprobs, -1);
  EXPECT_FALSE(request->stream);
  EXPECT_FALSE(request->include_usage);
  EXPECT_TRUE(request->skip_special_tokens);
  EXPECT_FALSE(request->options.params.seed.has_value());
}

TEST_F(CompletionRequestTest, AllSamplingFields) {
  auto request = parse(R"({"prompt": "Hi", "max_tokens": 5, "temperature": 0.5, "top_p": 0.9,
      "top_k": 40, "min_p": 0.05, "seed": 7, "stop": ["\n", "END"], "n": 3,
      "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
      "logprobs": 2, "stream": true, "stream_options": {"include_usage": true},
      "stop_token_ids": [5, 6], "ignore_eos": true, "skip_special_tokens": false,
      "user": "someone", "unknown_field": {"nested": [1, 2]}})");
  ASSERT_TRUE(request.ok()) << request.message();
  const SamplingParams& params = request->options.params;
  EXPECT_EQ(params.max_tokens, 5);
  EXPECT_FLOAT_EQ(params.temperature, 0.5f);
  EXPECT_FLOAT_EQ(params.top_p, 0.9f);
  EXPECT_EQ(params.top_k, 40);
  EXPECT_FLOAT_EQ(params.min_p, 0.05f);
  EXPECT_EQ(params.seed, std::optional<uint64_t>(7));
  EXPECT_EQ(params.stop_strings, (std::vector<std::string>{"\n", "END"}));
  EXPECT_EQ(params.stop_token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_FLOAT_EQ(params.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(params.frequency_penalty, -0.5f);
  EXPECT_FLOAT_EQ(params.repetition_penalty, 1.1f);
  EXPECT_TRUE(params.ignore_eos);
  EXPECT_EQ(request->options.n, 3);
  EXPECT_EQ(request->options.top_logprobs, 2);
  EXPECT_TRUE(request->stream);
  EXPECT_TRUE(request->include_usage);
  EXPECT_FALSE(request->skip_special_tokens);
}

TEST_F(CompletionRequestTest, NullMeansDefault) {
  auto request = parse(R"({"prompt": "Hi", "max_tokens": null, "temperature": null, "stop": null,
                           "logprobs": null, "n": null, "seed": null})");
  ASSERT_TRUE(request.ok()) << request.message();
  EXPECT_EQ(request->options.params.max_tokens, 16);
  EXPECT_TRUE(request->options.params.stop_strings.empty());
  EXPECT_EQ(request->options.top_logprobs, -1);
}

TEST_F(CompletionRequestTest, TokenIdPromptsAndSingleElementBatches) {
  auto ids = parse(R"({"prompt": [1, 300, 2047]})");
  ASSERT_TRUE(ids.ok()) << ids.message();
  EXPECT_EQ(ids->options.prompt, (std::vector<int32_t>{1, 300, 2047}));
  auto nested = parse(R"({"prompt": [[1, 300]]})");
  ASSERT_TRUE(nested.ok()) << nested.message();
  EXPECT_EQ(nested->options.prompt, (std::vector<int32_t>{1, 300}));
  auto one_string = parse(R"({"prompt": ["Once"]})");
  ASSERT_TRUE(one_string.ok()) << one_string.message();
  EXPECT_EQ(one_string->options.prompt, tokenizer_->encode("Once", true));
  auto integral_float = parse(R"({"prompt": "x", "max_tokens": 8.0, "n": 2.0})");
  ASSERT_TRUE(integral_float.ok()) << integral_float.message();
  EXPECT_EQ(integral_float->options.params.max_tokens, 8);
}

TEST_F(CompletionRequestTest, BadPrompts) {
  expect_400(R"({"max_tokens": 3})", "'prompt' is required");
  expect_400(R"({"prompt": null})", "'prompt' is required");
  expect_400(R"({"prompt": ["a", "b"]})", "batched prompts are not supported");
  expect_400(R"({"prompt": [[1], [2]]})", "batched prompts are not supported");
  expect_400(R"({"prompt": 5})", "'prompt' must be a string or an array of token ids, got number");
  expect_400(R"({"prompt": [1, 2048]})", "'prompt[1]': token id 2048 is out of range [0, 2048)");
  expect_400(R"({"prompt": [1, -1]})", "'prompt[1]': token id -1 is out of range");
  expect_400(R"({"prompt": [1, 18446744073709551615]})", "'prompt[1]': token id");
  expect_400(R"({"prompt": [1, 2.5]})", "'prompt[1]' must be a token id (an integer), got number");
  expect_400(R"({"prompt": [1, "a"]})", "'prompt[1]' must be a token id (an integer), got string");
  expect_400(R"({"prompt": []})", "'prompt' must not be empty");
}

TEST_F(CompletionRequestTest, WrongTypesNameTheField) {
  expect_400(R"({"prompt": "x", "temperature": "hot"})",
             "'temperature' must be a number, got string");
  expect_400(R"({"prompt": "x", "top_p": true})", "'top_p' must be a number, got boolean");
  expect_400(R"({"prompt": "x", "max_tokens": "16"})",
             "'max_tokens' must be an integer, got string");
  expect_400(R"({"prompt": "x", "n": 1.5})", "'n' must be an integer, got 1.5");
  expect_400(R"({"prompt": "x", "top_k": [1]})", "'top_k' must be an integer, got array");
  expect_400(R"({"prompt": "x", "seed": "1"})", "'seed' must be an integer, got string");
  expect_400(R"({"prompt": "x", "stream": "yes"})", "'stream' must be a boolean, got string");
  expect_400(R"({"prompt": "x", "stop": 5})",
             "'stop' must be a string or an array of strings, got number");
  expect_400(R"({"prompt": "x", "stop": ["a", 1]})", "'stop[1]' must be a string, got number");
  expect_400(R"({"prompt": "x", "logprobs": true})", "'logprobs' must be an integer, got boolean");
  expect_400(R"({"prompt": "x", "model": 3})", "'model' must be a string, got number");
  expect_400(R"({"prompt": "x", "stop_token_ids": [1, "2"]})",
             "'stop_token_ids[1]' must be a 32-bit integer");
  expect_400(R"({"prompt": "x", "stream": true, "stream_options": []})",
             "'stream_options' must be an object, got array");
  expect_400(R"({"prompt": "x", "extra_body": 1})", "'extra_body' must be an object, got number");
}

TEST_F(CompletionRequestTest, OutOfRangeValues) {
  expect_400(R"({"prompt": "x", "temperature": -0.1})",
             "'temperature' must be in [0, 100], got -0.1");
  expect_400(R"({"prompt": "x", "top_p": 0})", "'top_p' must be in (0, 1], got 0");
  expect_400(R"({"prompt": "x", "top_p": 1.5})", "'top_p' must be in (0, 1], got 1.5");
  expect_400(R"({"prompt": "x", "top_k": -2})", "'top_k' must be in [-1,");
  expect_400(R"({"prompt": "x", "min_p": 1.5})", "'min_p' must be in [0, 1], got 1.5");
  expect_400(R"({"prompt": "x", "presence_penalty": 2.5})",
             "'presence_penalty' must be in [-2, 2]");
  expect_400(R"({"prompt": "x", "frequency_penalty": -3})",
             "'frequency_penalty' must be in [-2, 2]");
  expect_400(R"({"prompt": "x", "repetition_penalty": 0})",
             "'repetition_penalty' must be in (0, 100]");
  expect_400(R"({"prompt": "x", "n": 0})", "'n' must be in [1, 16], got 0");
  expect_400(R"({"prompt": "x", "n": 17})", "'n' must be in [1, 16], got 17");
  expect_400(R"({"prompt": "x", "logprobs": 6})", "'logprobs' must be in [0, 5], got 6");
  expect_400(R"({"prompt": "x", "max_tokens": 0})", "'max_tokens' must be at least 1, got 0");
  expect_400(R"({"prompt": "x", "max_tokens": -5})", "'max_tokens' must be at least 1, got -5");
  expect_400(R"({"prompt": "x", "stop": ["a", ""]})", "'stop[1]' must not be empty");
  expect_400(R"({"prompt": "x", "stop_token_ids": [-1]})", "'stop_token_ids[0]' must be >= 0");
  expect_400(R"({"prompt": "x", "temperature": 1e999})", "number overflow parsing '1e999'");
  std::string many_stops = R"({"prompt": "x", "stop": [)";
  for (int i = 0; i < 17; ++i) many_stops += (i ? ",\"s" : "\"s") + std::to_string(i) + "\"";
  expect_400(many_stops + "]}", "'stop' may hold at most 16 strings, got 17");
}

TEST_F(CompletionRequestTest, MalformedBodies) {
  expect_400("", "request body is not valid JSON");
  expect_400(R"({"prompt": "x",})", "request body is not valid JSON: parse error at line 1");
  expect_400(R"({"prompt": "x"} trailing)", "request body is not valid JSON");
  expect_400(R"(["prompt"])", "request body must be a JSON object, got array");
  expect_400("42", "request body must be a JSON object, got number");
  // A lone surrogate escape is not a valid string either.
  expect_400(R"({"prompt": "\ud800"})", "request body is not valid JSON");
  std::string deep =
      R"({"prompt": "x", "extra": )" + std::string(100, '[') + std::string(100, ']') + "}";
  expect_400(deep, "nests JSON deeper than 64 levels");
}

TEST_F(CompletionRequestTest, InvalidUtf8NamesTheOffset) {
  // 17 bytes of `{"prompt": "ab` then a bare continuation byte.
  const std::string body = std::string("{\"prompt\": \"ab") + '\x80' + "\"}";
  expect_400(body, "request body is not valid UTF-8 (byte offset 14)");
  expect_400(std::string("{\"prompt\": \"\xC3\"}"),
             "not valid UTF-8 (byte offset 12)");  // truncated
  expect_400(std::string("{\"prompt\": \"\xC0\xAF\"}"),
             "not valid UTF-8 (byte offset 12)");  // overlong
  expect_400(std::string("{\"prompt\": \"\xED\xA0\x80\"}"),
             "not valid UTF-8 (byte offset 12)");  // surrogate
  expect_400(std::string("{\"prompt\": \"\xF4\x90\x80\x80\"}"), "not valid UTF-8 (byte offset 12)");
  // Valid multi-byte text passes.
  auto ok = parse("{\"prompt\": \"caf\xC3\xA9 \xF0\x9F\x98\x80\"}");
  EXPECT_TRUE(ok.ok()) << ok.message();
}

TEST_F(CompletionRequestTest, UnknownModelIs404) {
  auto result = parse(R"({"model": "gpt-4", "prompt": "x"})");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().code, ErrorCode::kErrorNotFound);
  EXPECT_EQ(http_status_for(result.error().code), 404);
  EXPECT_NE(result.message().find("'gpt-4' does not exist"), std::string::npos);
  EXPECT_TRUE(parse(R"({"prompt": "x"})").ok());  // absent: the served model
}

TEST_F(CompletionRequestTest, OverContextSaysTheNumbers) {
  auto request = parse(R"({"prompt": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "max_tokens": 60})");
  ASSERT_FALSE(request.ok());
  EXPECT_EQ(http_status_for(request.error().code), 400);
  EXPECT_EQ(request.message(),
            "This model's maximum context length is 64 tokens. However, you requested 70 tokens "
            "(10 in the prompt, 60 in the completion). Please reduce the length of the prompt or "
            "completion.");
  EXPECT_TRUE(parse(R"({"prompt": [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "max_tokens": 54})").ok());
  // Beyond int32 with no context bound is still caught.
  model_.max_context = 0;
  expect_400(R"({"prompt": "x", "max_tokens": 4294967296})",
             "'max_tokens' must be at most 2147483647");
}

TEST_F(CompletionRequestTest, ExtraBodyIsMergedToTopLevel) {
  auto request = parse(R"({"prompt": "x", "top_k": 3, "extra_body": {"top_k": 5, "min_p": 0.1}})");
  ASSERT_TRUE(request.ok()) << request.message();
  EXPECT_EQ(request->options.params.top_k, 5);
  EXPECT_FLOAT_EQ(request->options.params.min_p, 0.1f);
  expect_400(R"({"prompt": "x", "extra_body": {"top_p": 7}})", "'top_p' must be in (0, 1]");
}

TEST_F(CompletionRequestTest, StreamOptionsNeedStream) {
  expect_400(R"({"prompt": "x", "stream_options": {"include_usage": true}})",
             "'stream_options' is only allowed when 'stream' is true");
  expect_400(R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})",
             "'include_usage' must be a boolean");
}

TEST_F(CompletionRequestTest, UnsupportedFieldsAreRejectedNotIgnored) {
  expect_400(R"({"prompt": "x", "echo": true})", "'echo' is not supported");
  expect_400(R"({"prompt": "x", "best_of": 3})", "'best_of' other than 1 is not supported");
  expect_400(R"({"prompt": "x", "logit_bias": {"5": 10}})", "'logit_bias' is not supported");
  // Without a grammar cache (this parser's ServedModel has none) structured
  // outputs are refused; server/structured_output_test.cpp covers them.
  expect_400(R"({"prompt": "x", "response_format": {"type": "json_object"}})",
             "'response_format' is not supported here");
  EXPECT_TRUE(parse(R"({"prompt": "x", "echo": false, "best_of": 1, "logit_bias": {}})").ok());
}

TEST_F(CompletionRequestTest, SeedsKeepTheirBits) {
  auto negative = parse(R"({"prompt": "x", "seed": -1})");
  ASSERT_TRUE(negative.ok()) << negative.message();
  EXPECT_EQ(negative->options.params.seed, std::optional<uint64_t>(UINT64_MAX));
  auto big = parse(R"({"prompt": "x", "seed": 18446744073709551615})");
  ASSERT_TRUE(big.ok()) << big.message();
  EXPECT_EQ(big->options.params.seed, std::optional<uint64_t>(UINT64_MAX));
}

TEST_F(CompletionRequestTest, ChatWithoutTemplateSaysWhy) {
  expect_400(
      R"({"messages": [{"role": "user", "content": "hi"}]})",
      "this model cannot serve chat completions: its tokenizer_config.json has no chat_template",
      ApiEndpoint::kApiChatCompletions);
}

// Deterministic mutations of valid bodies: parsing never crashes and every
// failure carries a message (the fuzz target explores further).
TEST_F(CompletionRequestTest, MutatedBodiesNeverCrash) {
  const std::vector<std::string> seeds = {
      R"({"model": "tiny", "prompt": "Once upon", "max_tokens": 5, "stop": ["a"], "n": 2})",
      R"({"prompt": [1, 2, 3], "logprobs": 3, "stream": true, "stream_options": {"include_usage": true}})",
      R"({"prompt": "x", "extra_body": {"top_k": 2}, "seed": -4})"};
  std::mt19937 rng(1234);
  const std::string alphabet = "{}[]\",:0123456789.-eEtruefalsn \\u\x80\xC3\xFF";
  int n_ok = 0;
  for (int iteration = 0; iteration < 3000; ++iteration) {
    std::string body = seeds[static_cast<size_t>(iteration) % seeds.size()];
    const int n_edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < n_edits && !body.empty(); ++e) {
      const size_t at = rng() % body.size();
      const char c = alphabet[rng() % alphabet.size()];
      switch (rng() % 3) {
        case 0:
          body[at] = c;
          break;
        case 1:
          body.insert(body.begin() + static_cast<std::ptrdiff_t>(at), c);
          break;
        default:
          body.erase(at, 1);
      }
    }
    auto result = parse(
        body, iteration % 2 ? ApiEndpoint::kApiCompletions : ApiEndpoint::kApiChatCompletions);
    if (result.ok()) {
      ++n_ok;
      EXPECT_FALSE(result->options.prompt.empty());
    } else {
      EXPECT_FALSE(result.message().empty());
    }
  }
  EXPECT_GT(n_ok, 0);  // the mutations are not all fatal, so validation paths ran too
}

// Chat requests against the real Llama-3 tokenizer and chat template.
class ChatRequestTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tokenizer_ = testing::load_llama3_tokenizer().release();
    if (tokenizer_ == nullptr) return;
    auto parsed = ChatTemplate::parse(tokenizer_->chat_template());
    if (parsed.ok()) chat_template_ = new ChatTemplate(std::move(parsed).value());
  }
  static void TearDownTestSuite() {
    delete chat_template_;
    delete tokenizer_;
    chat_template_ = nullptr;
    tokenizer_ = nullptr;
  }
  void SetUp() override {
    if (tokenizer_ == nullptr) GTEST_SKIP() << "npm llama3 tokenizer not installed";
    ASSERT_NE(chat_template_, nullptr);
    model_.tokenizer = tokenizer_;
    model_.chat_template = chat_template_;
    model_.name = "llama";
    model_.max_context = 1000;
    model_.vocab_size = tokenizer_->vocab_size();
  }
  Result<OpenAiRequest> parse(const std::string& body) {
    return parse_openai_request(ApiEndpoint::kApiChatCompletions, body, model_);
  }
  void expect_400(const std::string& body, const std::string& needle) {
    auto result = parse(body);
    ASSERT_FALSE(result.ok()) << body;
    EXPECT_EQ(http_status_for(result.error().code), 400);
    EXPECT_NE(result.message().find(needle), std::string::npos)
        << "message: " << result.message() << "\nexpected: " << needle;
  }

  static Tokenizer* tokenizer_;
  static ChatTemplate* chat_template_;
  ServedModel model_;
};
Tokenizer* ChatRequestTest::tokenizer_ = nullptr;
ChatTemplate* ChatRequestTest::chat_template_ = nullptr;

TEST_F(ChatRequestTest, GoldenConversationsTokenizeLikeTransformers) {
  const OrderedJson chat = OrderedJson::parse(
      testing::read_text_file(testing::test_data("golden/tokenizers/llama3/chat.json")));
  for (const OrderedJson& conversation : chat["conversations"]) {
    OrderedJson body = OrderedJson::object();
    body["model"] = "llama";
    body["messages"] = conversation["messages"];
    auto request = parse(body.dump());
    ASSERT_TRUE(request.ok()) << request.message();
    EXPECT_EQ(request->options.prompt, conversation["ids_of_rendered"].get<std::vector<int32_t>>());
  }
}

TEST_F(ChatRequestTest, DefaultMaxTokensFillsTheContext) {
  auto request = parse(R"({"messages": [{"role": "user", "content": "Hello"}]})");
  ASSERT_TRUE(request.ok()) << request.message();
  const auto n_prompt = static_cast<int32_t>(request->options.prompt.size());
  EXPECT_EQ(request->options.params.max_tokens, 1000 - n_prompt);
  auto capped = parse(
      R"({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 50, "max_completion_tokens": 7})");
  ASSERT_TRUE(capped.ok()) << capped.message();
  EXPECT_EQ(capped->options.params.max_tokens, 7);

  auto over = parse(R"({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 999})");
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.message(),
            fmt::format("This model's maximum context length is 1000 tokens. However, you "
                        "requested {} tokens ({} in the messages, 999 in the completion). Please "
                        "reduce the length of the messages or completion.",
                        n_prompt + 999, n_prompt));
  model_.max_context = n_prompt;  // no room at all: still the context error, not max_tokens
  expect_400(R"({"messages": [{"role": "user", "content": "Hello"}]})",
             fmt::format("you requested {} tokens ({} in the messages, 1 in the completion)",
                         n_prompt + 1, n_prompt));
}

TEST_F(ChatRequestTest, ContentPartsFlattenToText) {
  auto as_string = parse(R"({"messages": [{"role": "user", "content": "Hello\nworld"}]})");
  auto as_parts = parse(R"({"messages": [{"role": "user", "content": [
      {"type": "text", "text": "Hello"}, {"type": "text", "text": "world"}]}]})");
  ASSERT_TRUE(as_string.ok()) << as_string.message();
  ASSERT_TRUE(as_parts.ok()) << as_parts.message();
  EXPECT_EQ(as_string->options.prompt, as_parts->options.prompt);
}

TEST_F(ChatRequestTest, LogprobsFlags) {
  auto with_top = parse(
      R"({"messages": [{"role": "user", "content": "a"}], "logprobs": true, "top_logprobs": 3})");
  ASSERT_TRUE(with_top.ok()) << with_top.message();
  EXPECT_EQ(with_top->options.top_logprobs, 3);
  auto plain = parse(R"({"messages": [{"role": "user", "content": "a"}], "logprobs": true})");
  ASSERT_TRUE(plain.ok());
  EXPECT_EQ(plain->options.top_logprobs, 0);
  auto off = parse(R"({"messages": [{"role": "user", "content": "a"}], "logprobs": false})");
  ASSERT_TRUE(off.ok());
  EXPECT_EQ(off->options.top_logprobs, -1);
  expect_400(R"({"messages": [{"role": "user", "content": "a"}], "top_logprobs": 2})",
             "'top_logprobs' requires 'logprobs' to be true");
  expect_400(
      R"({"messages": [{"role": "user", "content": "a"}], "logprobs": true, "top_logprobs": 21})",
      "'top_logprobs' must be in [0, 20], got 21");
  expect_400(R"({"messages": [{"role": "user", "content": "a"}], "logprobs": 1})",
             "'logprobs' must be a boolean, got number");
}

TEST_F(ChatRequestTest, BadMessages) {
  expect_400(R"({"model": "llama"})", "'messages' is required");
  expect_400(R"({"messages": []})", "'messages' must not be empty");
  expect_400(R"({"messages": {"role": "user"}})", "'messages' must be an array, got object");
  expect_400(R"({"messages": ["hi"]})", "'messages[0]' must be an object, got string");
  expect_400(R"({"messages": [{"content": "hi"}]})", "'messages[0].role' must be a string");
  expect_400(R"({"messages": [{"role": "user", "content": 5}]})",
             "'messages[0].content' must be a string or an array of content parts, got number");
  expect_400(
      R"({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]})",
      "'messages[0].content[0]': only 'text' content parts are supported, got 'image_url'");
  expect_400(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})",
             "'messages[0].content[0].text' must be a string");
  expect_400(R"({"messages": [{"role": "user", "content": "a"}], "chat_template_kwargs": 3})",
             "'chat_template_kwargs' must be an object");
}

TEST_F(ChatRequestTest, ContinueFinalMessageEndsInsideIt) {
  auto request = parse(R"({"messages": [{"role": "user", "content": "Hi"},
      {"role": "assistant", "content": "Once upon"}], "continue_final_message": true,
      "add_generation_prompt": false})");
  ASSERT_TRUE(request.ok()) << request.message();
  const std::string text = tokenizer_->decode(request->options.prompt);
  EXPECT_EQ(text.substr(text.size() - 9), "Once upon");
  expect_400(R"({"messages": [{"role": "user", "content": "Hi"}], "continue_final_message": true,
      "add_generation_prompt": true})",
             "cannot both be true");
}

}  // namespace
}  // namespace specstack
