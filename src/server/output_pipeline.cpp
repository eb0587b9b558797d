#include "server/output_pipeline.h"

#include <algorithm>

namespace fp4serve::server {

void OutputPiece::append(OutputPiece other) {
  content += other.content;
  reasoning += other.reasoning;
  for (ToolCall& c : other.calls) calls.push_back(std::move(c));
}

std::string token_text(const tokenizer::Tokenizer& tokenizer, std::int32_t token) {
  return tokenizer.has_token(token) ? tokenizer.token_bytes(static_cast<tokenizer::TokenId>(token)) : std::string();
}

OutputPipeline::OutputPipeline(const tokenizer::Tokenizer& tokenizer, OutputOptions options)
    : tokenizer_(tokenizer),
      options_(std::move(options)),
      decoder_(tokenizer, options_.skip_special_tokens),
      stop_(options_.stop) {
  if (options_.parse_reasoning) reasoning_.emplace(options_.reasoning_open_at_start);
  if (options_.parse_tool_calls) tools_.emplace(options_.call_id_prefix);
}

OutputPiece OutputPipeline::route(const std::string& text) {
  OutputPiece p;
  if (text.empty()) return p;
  std::string content = text;
  if (reasoning_) {
    ReasoningDelta d = reasoning_->push(text);
    p.reasoning = std::move(d.reasoning);
    content = std::move(d.content);
  }
  if (tools_) {
    ToolCallDelta d = tools_->push(content);
    p.content = std::move(d.content);
    p.calls = std::move(d.calls);
  } else {
    p.content = std::move(content);
  }
  return p;
}

OutputPiece OutputPipeline::flush_parsers() {
  OutputPiece p;
  std::string content;
  if (reasoning_) {
    ReasoningDelta d = reasoning_->flush();
    p.reasoning = std::move(d.reasoning);
    content = std::move(d.content);
  }
  if (tools_) {
    ToolCallDelta d = tools_->push(content);
    ToolCallDelta rest = tools_->flush();
    p.content = d.content + rest.content;
    p.calls = std::move(d.calls);
    for (ToolCall& c : rest.calls) p.calls.push_back(std::move(c));
  } else {
    p.content = std::move(content);
  }
  return p;
}

OutputPiece OutputPipeline::push(std::int32_t token) {
  if (finished_ || stop_.stopped()) return {};
  if (std::find(options_.hidden_tokens.begin(), options_.hidden_tokens.end(), token) != options_.hidden_tokens.end()) {
    return {};
  }
  // An id the tokenizer does not define (the lm_head's padding rows) has no text.
  const std::string text = tokenizer_.has_token(token) ? decoder_.push(static_cast<tokenizer::TokenId>(token)) : std::string();
  StopMatcher::Result r = stop_.push(text);
  if (r.stopped && options_.include_stop_str) r.text += stop_.matched();
  return route(r.text);
}

OutputPiece OutputPipeline::finish() {
  if (finished_) return {};
  finished_ = true;
  OutputPiece p;
  if (!stop_.stopped()) {
    StopMatcher::Result r = stop_.push(decoder_.finish());
    if (r.stopped && options_.include_stop_str) r.text += stop_.matched();
    if (!r.stopped) r.text += stop_.flush();
    p = route(r.text);
  }
  p.append(flush_parsers());
  return p;
}

}  // namespace fp4serve::server
