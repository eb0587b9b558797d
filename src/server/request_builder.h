#pragma once
// From a parsed OpenAI request to what the scheduler runs: the prompt (chat template rendered
// and tokenized, or the completion prompt), the sampling parameters, the stop tokens and the
// token budget, checked against the context length. Also decides which output parsers apply.
#include <cstdint>
#include <string>
#include <vector>

#include "engine/generation_config.h"
#include "engine/scheduler.h"
#include "server/openai_protocol.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace fp4serve::server {

// What the model brings, fixed once it is loaded.
struct ModelContext {
  std::string served_name;
  const tokenizer::Tokenizer* tokenizer = nullptr;
  const tokenizer::ChatTemplate* chat_template = nullptr;  // null: the checkpoint has none
  std::vector<std::int32_t> eos_tokens;
  std::int64_t max_model_len = 0;
  bool has_reasoning_tags = false;  // the vocabulary has <think> and </think>
  // generation_config.json's sampling, for fields a request leaves out (--generation-config auto).
  engine::SamplingDefaults sampling_defaults;
};

struct BuiltRequest {
  engine::RequestSpec spec;
  std::string prompt_text;             // rendered chat prompt or completion prompt text
  bool parse_reasoning = false;
  bool reasoning_open_at_start = false;  // the template ended the prompt inside <think>
  bool parse_tool_calls = false;
  std::vector<std::int32_t> hidden_tokens;  // stop tokens whose text is never shown
};

// 404 unless `model` is the served name.
void check_model_name(const ModelContext& m, const std::string& model);

BuiltRequest build_chat_request(const ModelContext& m, const ChatCompletionRequest& r);
BuiltRequest build_completion_request(const ModelContext& m, const CompletionRequest& r);

}  // namespace fp4serve::server
