#pragma once
// Qwen3 thinking: the model writes its reasoning inside <think>...</think> before the answer.
// The parser splits streamed text into reasoning (returned as `reasoning_content`, as vLLM and
// SGLang do) and content, holding back only what could be the start of a tag.
//
// Two template styles exist: Qwen3 lets the model open <think> itself; the 2507 thinking models'
// template ends the prompt with "<think>\n", so the output starts inside the reasoning and only
// "</think>" appears. The caller says which through `starts_in_reasoning`.
#include <string>
#include <string_view>

namespace fp4serve::server {

struct ReasoningDelta {
  std::string reasoning;
  std::string content;
};

class ReasoningParser {
 public:
  explicit ReasoningParser(bool starts_in_reasoning = false);
  ReasoningDelta push(std::string_view text);
  ReasoningDelta flush();  // end of output: whatever was held back goes where it was heading

 private:
  enum class State { Start, Reasoning, AfterReasoning, Content };
  State state_;
  std::string held_;
};

// Whether a rendered prompt leaves the model inside a <think> block (the template opened it).
bool prompt_opens_reasoning(std::string_view prompt);

}  // namespace fp4serve::server
