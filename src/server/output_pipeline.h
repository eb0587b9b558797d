#pragma once
// Generated tokens to what the client sees, one token at a time:
//   streaming detokenizer -> stop strings -> <think> split -> <tool_call> parsing.
// Each stage holds back only what it must, so a streamed response shows text as soon as it is
// final, and the concatenation of all pieces equals the non-streamed response.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "server/reasoning_parser.h"
#include "server/stop_strings.h"
#include "server/tool_call_parser.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace fp4serve::server {

struct OutputPiece {
  std::string content;
  std::string reasoning;
  std::vector<ToolCall> calls;
  bool empty() const { return content.empty() && reasoning.empty() && calls.empty(); }
  void append(OutputPiece other);
};

struct OutputOptions {
  std::vector<std::string> stop;
  bool include_stop_str = false;
  bool skip_special_tokens = true;
  std::vector<std::int32_t> hidden_tokens;  // stop tokens: counted, never shown
  bool parse_reasoning = false;
  bool reasoning_open_at_start = false;
  bool parse_tool_calls = false;
  std::string call_id_prefix;
};

class OutputPipeline {
 public:
  OutputPipeline(const tokenizer::Tokenizer& tokenizer, OutputOptions options);
  OutputPiece push(std::int32_t token);
  OutputPiece finish();  // end of generation: flushes every stage
  // A stop string matched: the caller cancels generation; further tokens are ignored.
  bool stop_hit() const { return stop_.stopped(); }
  std::size_t tool_calls() const { return tools_ ? tools_->calls() : 0; }

 private:
  OutputPiece route(const std::string& text);  // stop-filtered text through reasoning and tools
  OutputPiece flush_parsers();

  const tokenizer::Tokenizer& tokenizer_;
  OutputOptions options_;
  tokenizer::StreamDecoder decoder_;
  StopMatcher stop_;
  std::optional<ReasoningParser> reasoning_;
  std::optional<ToolCallParser> tools_;
  bool finished_ = false;
};

// The text of one token for logprobs ("" for an id the tokenizer does not know, e.g. padding
// rows of the embedding), and its raw bytes.
std::string token_text(const tokenizer::Tokenizer& tokenizer, std::int32_t token);

}  // namespace fp4serve::server
