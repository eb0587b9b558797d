#pragma once
// Request bodies of /v1/chat/completions and /v1/completions, parsed and checked into typed
// requests. Every problem is an ApiError (400) naming the parameter, as OpenAI's API does:
// malformed JSON, wrong types, out-of-range values, unsupported features (n > 1, images, forced
// tool choice) and unknown top-level fields. Fields OpenAI clients commonly send that change
// nothing here (user, metadata, store, ...) are accepted and ignored; vLLM's extensions that the
// engine implements (top_k, min_p, repetition_penalty, stop_token_ids, ignore_eos,
// chat_template_kwargs, ...) are accepted too.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/api_error.h"

namespace fp4serve::server {

// What both endpoints share: the model name and how to generate.
struct GenerationOptions {
  std::string model;
  std::optional<std::int64_t> max_tokens;  // max_completion_tokens wins over max_tokens
  // Unset: the model's generation_config.json recommendation if it has one, else OpenAI's default
  // (request_builder.h decides).
  std::optional<double> temperature;
  std::optional<double> top_p;
  std::optional<std::int64_t> top_k;  // 0 = off (-1 is accepted as off, as vLLM does)
  std::optional<double> min_p;
  std::optional<std::uint64_t> seed;
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  std::optional<double> repetition_penalty;
  std::vector<std::string> stop;  // at most 4
  bool include_stop_str_in_output = false;
  std::vector<std::int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool stream = false;
  bool include_usage = false;       // stream_options.include_usage
  bool logprobs = false;
  std::int64_t top_logprobs = 0;    // 0..20
};

struct ChatCompletionRequest {
  GenerationOptions options;
  nlohmann::ordered_json messages;  // checked; content flattened to strings, developer -> system
  nlohmann::ordered_json tools;     // null when absent or tool_choice is "none"
  nlohmann::ordered_json template_kwargs = nlohmann::ordered_json::object();  // chat_template_kwargs
};

struct CompletionRequest {
  GenerationOptions options;
  std::optional<std::string> prompt_text;  // a string prompt, or
  std::vector<std::int32_t> prompt_ids;    // a prompt given as token ids
  bool echo = false;
};

ChatCompletionRequest parse_chat_completion_request(std::string_view body);
CompletionRequest parse_completion_request(std::string_view body);

}  // namespace fp4serve::server
