#include "server/openai_protocol.h"

#include <gtest/gtest.h>

#include <string>

namespace fp4serve::server {
namespace {

// Expects parsing `body` to fail with HTTP 400 naming `param` and saying `words`.
template <class Parse>
void expect_rejected(Parse parse, const std::string& body, const std::string& param, const std::string& words) {
  try {
    parse(body);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << body;
    EXPECT_EQ(e.param(), param) << body << " -> " << e.what();
    EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << body << " -> " << e.what();
    const auto j = e.to_json();
    EXPECT_EQ(j["error"]["type"], "invalid_request_error");
    return;
  }
  ADD_FAILURE() << "accepted: " << body;
}

void chat_rejects(const std::string& body, const std::string& param, const std::string& words) {
  expect_rejected([](const std::string& b) { parse_chat_completion_request(b); }, body, param, words);
}
void completion_rejects(const std::string& body, const std::string& param, const std::string& words) {
  expect_rejected([](const std::string& b) { parse_completion_request(b); }, body, param, words);
}

const std::string kMsgs = R"("model": "m", "messages": [{"role": "user", "content": "hi"}])";

TEST(ChatRequest, ParsesEveryGenerationOption) {
  const auto r = parse_chat_completion_request(
      R"({"model": "m", "messages": [{"role": "developer", "content": "be brief"},
          {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}],
          "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "top_k": 40, "min_p": 0.05, "seed": -3,
          "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.1,
          "stop": ["x", "yy"], "stop_token_ids": [5], "stream": true, "stream_options": {"include_usage": true},
          "logprobs": true, "top_logprobs": 3, "n": 1, "user": "u", "logit_bias": {},
          "chat_template_kwargs": {"enable_thinking": false}})");
  EXPECT_EQ(r.options.model, "m");
  EXPECT_EQ(r.options.max_tokens, 7);
  EXPECT_EQ(r.options.temperature, 0.5);
  EXPECT_EQ(r.options.top_p, 0.9);
  EXPECT_EQ(r.options.top_k, 40);
  EXPECT_EQ(r.options.min_p, 0.05);
  EXPECT_EQ(r.options.seed, static_cast<std::uint64_t>(-3));
  EXPECT_DOUBLE_EQ(r.options.presence_penalty, 0.5);
  EXPECT_DOUBLE_EQ(r.options.frequency_penalty, -0.5);
  EXPECT_EQ(r.options.repetition_penalty, 1.1);
  EXPECT_EQ(r.options.stop, (std::vector<std::string>{"x", "yy"}));
  EXPECT_EQ(r.options.stop_token_ids, std::vector<std::int32_t>{5});
  EXPECT_TRUE(r.options.stream);
  EXPECT_TRUE(r.options.include_usage);
  EXPECT_TRUE(r.options.logprobs);
  EXPECT_EQ(r.options.top_logprobs, 3);
  EXPECT_EQ(r.messages[0]["role"], "system");
  EXPECT_EQ(r.messages[1]["content"], "a\nb");
  EXPECT_EQ(r.template_kwargs["enable_thinking"], false);
  EXPECT_TRUE(r.tools.is_null());
}

TEST(ChatRequest, MaxCompletionTokensWinsAndDefaultsAreOpenAIs) {
  auto r = parse_chat_completion_request("{" + kMsgs + R"(, "max_tokens": 5, "max_completion_tokens": 9})");
  EXPECT_EQ(r.options.max_tokens, 9);
  r = parse_chat_completion_request("{" + kMsgs + "}");
  EXPECT_FALSE(r.options.max_tokens);
  EXPECT_FALSE(r.options.temperature);  // left to the model's generation_config, then OpenAI's 1.0
  EXPECT_FALSE(r.options.stream);
  EXPECT_FALSE(r.options.top_k);
  r = parse_chat_completion_request("{" + kMsgs + R"(, "top_k": -1, "max_tokens": 4.0, "stop": "s"})");
  EXPECT_EQ(r.options.top_k, 0);
  EXPECT_EQ(r.options.max_tokens, 4);
  EXPECT_EQ(r.options.stop, std::vector<std::string>{"s"});
}

TEST(ChatRequest, AssistantToolCallTurnsAndToolsAreKept) {
  const auto r = parse_chat_completion_request(
      R"({"model": "m", "messages": [{"role": "user", "content": "w?"},
          {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
            "function": {"name": "get", "arguments": "{\"a\":1}"}}]},
          {"role": "tool", "tool_call_id": "c1", "content": "sunny"}],
          "tools": [{"type": "function", "function": {"name": "get", "parameters": {"type": "object"}}}],
          "tool_choice": "auto"})");
  EXPECT_EQ(r.messages[1]["content"], "");
  EXPECT_EQ(r.messages[1]["tool_calls"][0]["function"]["name"], "get");
  ASSERT_TRUE(r.tools.is_array());
  EXPECT_EQ(r.tools[0]["function"]["name"], "get");
  const auto none = parse_chat_completion_request(
      "{" + kMsgs + R"(, "tools": [{"type": "function", "function": {"name": "g"}}], "tool_choice": "none"})");
  EXPECT_TRUE(none.tools.is_null());
}

TEST(ChatRequest, ModelMayBeOmittedAsInVllm) {
  const auto r = parse_chat_completion_request(R"({"messages": [{"role": "user", "content": "hi"}]})");
  EXPECT_EQ(r.options.model, "");  // the served model
}

TEST(ChatRequest, MalformedBodiesAreRejected) {
  chat_rejects("{", "", "not valid JSON");
  chat_rejects("", "", "not valid JSON");
  chat_rejects("[1]", "", "must be a JSON object");
  chat_rejects(R"({"model": 3, "messages": []})", "model", "must be a string");
  chat_rejects(R"({"model": "m"})", "messages", "'messages' is required");
  chat_rejects(R"({"model": "m", "messages": []})", "messages", "at least one");
  chat_rejects(R"({"model": "m", "messages": "hi"})", "messages", "must be an array");
  chat_rejects(R"({"model": "m", "messages": [{"content": "hi"}]})", "messages[0].role", "must be a string");
  chat_rejects(R"({"model": "m", "messages": [{"role": "wizard", "content": "hi"}]})", "messages[0].role", "wizard");
  chat_rejects(R"({"model": "m", "messages": [{"role": "user"}]})", "messages[0].content", "required");
  chat_rejects(R"({"model": "m", "messages": [{"role": "user", "content": 5}]})", "messages[0].content",
               "must be a string or an array");
  chat_rejects(R"({"model": "m", "messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
               "messages[0].content[0].type", "not supported");
}

TEST(ChatRequest, BadParametersNameTheParameter) {
  chat_rejects("{" + kMsgs + R"(, "max_tokens": -1})", "max_tokens", "between 1");
  chat_rejects("{" + kMsgs + R"(, "max_tokens": 0})", "max_tokens", "between 1");
  chat_rejects("{" + kMsgs + R"(, "max_tokens": 1e30})", "max_tokens", "an integer");
  chat_rejects("{" + kMsgs + R"(, "max_tokens": 99999999999})", "max_tokens", "between 1");
  chat_rejects("{" + kMsgs + R"(, "max_tokens": "10"})", "max_tokens", "must be an integer, got a string");
  chat_rejects("{" + kMsgs + R"(, "max_tokens": 2.5})", "max_tokens", "an integer");
  chat_rejects("{" + kMsgs + R"(, "temperature": 3})", "temperature", "between 0 and 2");
  chat_rejects("{" + kMsgs + R"(, "temperature": "hot"})", "temperature", "must be a number");
  chat_rejects("{" + kMsgs + R"(, "top_p": 0})", "top_p", "greater than 0");
  chat_rejects("{" + kMsgs + R"(, "top_k": -2})", "top_k", "between -1");
  chat_rejects("{" + kMsgs + R"(, "min_p": 1.5})", "min_p", "between 0 and 1");
  chat_rejects("{" + kMsgs + R"(, "presence_penalty": 2.5})", "presence_penalty", "between -2 and 2");
  chat_rejects("{" + kMsgs + R"(, "repetition_penalty": 0})", "repetition_penalty", "greater than 0");
  chat_rejects("{" + kMsgs + R"(, "stop": ["a", "b", "c", "d", "e"]})", "stop", "at most 4");
  chat_rejects("{" + kMsgs + R"(, "stop": [1]})", "stop", "a string or an array of strings");
  chat_rejects("{" + kMsgs + R"(, "n": 2})", "n", "not supported");
  chat_rejects("{" + kMsgs + R"(, "top_logprobs": 21, "logprobs": true})", "top_logprobs", "between 0 and 20");
  chat_rejects("{" + kMsgs + R"(, "top_logprobs": 2})", "top_logprobs", "needs 'logprobs'");
  chat_rejects("{" + kMsgs + R"(, "logprobs": 1})", "logprobs", "must be a boolean");
  chat_rejects("{" + kMsgs + R"(, "stream_options": {"include_usage": true}})", "stream_options", "only allowed");
  chat_rejects("{" + kMsgs + R"(, "frobnicate": 1})", "frobnicate", "Unrecognized request argument");
  chat_rejects("{" + kMsgs + R"(, "tool_choice": "required"})", "tool_choice", "not supported");
  chat_rejects("{" + kMsgs + R"(, "tools": [{"type": "function", "function": {}}]})", "tools[0].function.name",
               "non-empty string");
  chat_rejects("{" + kMsgs + R"(, "response_format": {"type": "json_object"}})", "response_format", "only");
  chat_rejects("{" + kMsgs + R"(, "logit_bias": {"5": 10}})", "logit_bias", "not supported");
  chat_rejects("{" + kMsgs + R"(, "chat_template_kwargs": {"enable_thinking": "yes"}})",
               "chat_template_kwargs.enable_thinking", "a boolean");
  chat_rejects("{" + kMsgs + R"(, "stop_token_ids": [-1]})", "stop_token_ids", "between 0");
}

TEST(ChatRequest, ErrorJsonHasOpenAIsShape) {
  try {
    parse_chat_completion_request("{" + kMsgs + R"(, "temperature": 9})");
    FAIL();
  } catch (const ApiError& e) {
    const auto j = e.to_json();
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_EQ(j["error"]["param"], "temperature");
    EXPECT_EQ(j["error"]["code"], "invalid_value");
  }
  const ApiError plain(404, "no such model", "not_found_error");
  EXPECT_TRUE(plain.to_json()["error"]["param"].is_null());
  EXPECT_TRUE(plain.to_json()["error"]["code"].is_null());
}

TEST(CompletionRequest, PromptForms) {
  auto r = parse_completion_request(R"({"model": "m", "prompt": "once upon", "logprobs": 2, "echo": true})");
  EXPECT_EQ(r.prompt_text, "once upon");
  EXPECT_TRUE(r.options.logprobs);
  EXPECT_EQ(r.options.top_logprobs, 2);
  EXPECT_TRUE(r.echo);
  r = parse_completion_request(R"({"model": "m", "prompt": ["one"]})");
  EXPECT_EQ(r.prompt_text, "one");
  r = parse_completion_request(R"({"model": "m", "prompt": [1, 2, 3]})");
  EXPECT_EQ(r.prompt_ids, (std::vector<std::int32_t>{1, 2, 3}));
  r = parse_completion_request(R"({"model": "m", "prompt": [[4, 5]]})");
  EXPECT_EQ(r.prompt_ids, (std::vector<std::int32_t>{4, 5}));
  EXPECT_FALSE(r.options.logprobs);
}

TEST(CompletionRequest, BadPromptsAreRejected) {
  completion_rejects(R"({"model": "m"})", "prompt", "required");
  completion_rejects(R"({"model": "m", "prompt": ""})", "prompt", "must not be empty");
  completion_rejects(R"({"model": "m", "prompt": []})", "prompt", "must not be empty");
  completion_rejects(R"({"model": "m", "prompt": ["a", "b"]})", "prompt", "batched prompts");
  completion_rejects(R"({"model": "m", "prompt": [1, -2]})", "prompt", "between 0");
  completion_rejects(R"({"model": "m", "prompt": {"a": 1}})", "prompt", "must be a string");
  completion_rejects(R"({"model": "m", "prompt": "x", "messages": []})", "messages", "Unrecognized");
  completion_rejects(R"({"model": "m", "prompt": "x", "suffix": "y"})", "suffix", "not supported");
  completion_rejects(R"({"model": "m", "prompt": "x", "logprobs": true})", "logprobs", "an integer");
  completion_rejects(R"({"model": "m", "prompt": "x", "best_of": 3})", "best_of", "not supported");
}

}  // namespace
}  // namespace fp4serve::server
