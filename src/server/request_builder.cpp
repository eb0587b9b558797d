#include "server/request_builder.h"

#include <algorithm>

#include "server/reasoning_parser.h"
#include "util/error.h"

namespace fp4serve::server {

namespace {

// A field the request sets wins; then the model's recommendation; then OpenAI's default.
engine::SamplingParams sampling_of(const GenerationOptions& o, const engine::SamplingDefaults& d) {
  engine::SamplingParams s;
  s.temperature = o.temperature.value_or(d.temperature.value_or(1.0));
  s.top_p = o.top_p.value_or(d.top_p.value_or(1.0));
  s.top_k = o.top_k.value_or(d.top_k.value_or(0));
  s.min_p = o.min_p.value_or(d.min_p.value_or(0.0));
  s.seed = o.seed;
  s.presence_penalty = o.presence_penalty;
  s.frequency_penalty = o.frequency_penalty;
  s.repetition_penalty = o.repetition_penalty.value_or(d.repetition_penalty.value_or(1.0));
  return s;
}

// The token budget and stop tokens common to both endpoints; `prompt_param` names where the
// prompt came from in errors ("messages" or "prompt").
void finish_spec(const ModelContext& m, const GenerationOptions& o, const char* prompt_param, BuiltRequest& b) {
  const std::int64_t prompt = static_cast<std::int64_t>(b.spec.prompt.size());
  if (prompt == 0) invalid_param(prompt_param, "the prompt is empty after tokenization");
  if (prompt >= m.max_model_len) {
    invalid_param(prompt_param,
                  "This model's maximum context length is " + std::to_string(m.max_model_len) +
                      " tokens. However, your " + prompt_param + " resulted in " + std::to_string(prompt) +
                      " tokens, leaving no room for a completion.",
                  "context_length_exceeded");
  }
  const std::int64_t room = m.max_model_len - prompt;
  if (o.max_tokens && *o.max_tokens > room) {
    invalid_param("max_tokens",
                  "This model's maximum context length is " + std::to_string(m.max_model_len) +
                      " tokens. However, you requested " + std::to_string(prompt + *o.max_tokens) + " tokens (" +
                      std::to_string(prompt) + " in the " + prompt_param + ", " + std::to_string(*o.max_tokens) +
                      " in the completion). Please reduce the length of the " + prompt_param +
                      " or of the completion.",
                  "context_length_exceeded");
  }
  b.spec.max_new_tokens = o.max_tokens ? *o.max_tokens : room;
  b.spec.sampling = sampling_of(o, m.sampling_defaults);
  b.spec.ignore_eos = o.ignore_eos;
  if (!o.ignore_eos) b.spec.stop_tokens = m.eos_tokens;
  for (std::int32_t id : o.stop_token_ids) {
    if (std::find(b.spec.stop_tokens.begin(), b.spec.stop_tokens.end(), id) == b.spec.stop_tokens.end()) {
      b.spec.stop_tokens.push_back(id);
    }
  }
  b.hidden_tokens = b.spec.stop_tokens;
  b.spec.logprobs = o.logprobs;
  b.spec.top_logprobs = o.logprobs ? o.top_logprobs : 0;
}

std::vector<std::int32_t> encode(const ModelContext& m, const std::string& text, const char* param) {
  try {
    const std::vector<tokenizer::TokenId> ids = m.tokenizer->encode(text);
    return {ids.begin(), ids.end()};
  } catch (const Error& e) {
    invalid_param(param, std::string("cannot tokenize the ") + param + ": " + e.what());
  }
}

}  // namespace

void check_model_name(const ModelContext& m, const std::string& model) {
  if (!model.empty() && model != m.served_name) {
    throw ApiError(404, "The model '" + model + "' does not exist; this server serves '" + m.served_name + "'",
                   "invalid_request_error", "model", "model_not_found");
  }
}

BuiltRequest build_chat_request(const ModelContext& m, const ChatCompletionRequest& r) {
  check_model_name(m, r.options.model);
  if (!m.chat_template) {
    throw ApiError(400, "this checkpoint has no chat template; use /v1/completions", "invalid_request_error",
                   "messages", "no_chat_template");
  }
  BuiltRequest b;
  tokenizer::ChatRequest cr;
  cr.messages = r.messages;
  cr.tools = r.tools;
  cr.add_generation_prompt = true;
  cr.extra = r.template_kwargs;
  try {
    b.prompt_text = m.chat_template->render(cr);
  } catch (const Error& e) {
    invalid_param("messages", std::string("the chat template rejected the messages: ") + e.what(),
                  "template_error");
  }
  b.spec.prompt = encode(m, b.prompt_text, "messages");
  finish_spec(m, r.options, "messages", b);
  b.parse_reasoning = m.has_reasoning_tags;
  b.reasoning_open_at_start = b.parse_reasoning && prompt_opens_reasoning(b.prompt_text);
  b.parse_tool_calls = r.tools.is_array();
  return b;
}

BuiltRequest build_completion_request(const ModelContext& m, const CompletionRequest& r) {
  check_model_name(m, r.options.model);
  BuiltRequest b;
  if (r.prompt_text) {
    b.prompt_text = *r.prompt_text;
    b.spec.prompt = encode(m, b.prompt_text, "prompt");
  } else {
    b.spec.prompt = r.prompt_ids;
    const std::size_t limit = m.tokenizer->id_limit();
    for (std::int32_t id : r.prompt_ids) {
      if (static_cast<std::size_t>(id) >= limit) {
        invalid_param("prompt", "token id " + std::to_string(id) + " is not in the vocabulary (ids are below " +
                                    std::to_string(limit) + ")");
      }
    }
    const std::vector<tokenizer::TokenId> ids(r.prompt_ids.begin(), r.prompt_ids.end());
    b.prompt_text = m.tokenizer->decode(ids);
  }
  finish_spec(m, r.options, "prompt", b);
  return b;
}

}  // namespace fp4serve::server
