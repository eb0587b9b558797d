#include "server/tool_call_parser.h"

#include <nlohmann/json.hpp>

#include "server/partial_match.h"

namespace fp4serve::server {

namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";

bool blank(std::string_view s) {
  for (char c : s) {
    if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return false;
  }
  return true;
}

}  // namespace

ToolCallParser::ToolCallParser(std::string id_prefix) : id_prefix_(std::move(id_prefix)) {}

void ToolCallParser::emit_content(std::string_view text, ToolCallDelta& out) {
  if (text.empty()) return;
  // Only the blank run right after a call is held; once real content has followed the call,
  // later blanks belong to that content however the text was split into pieces.
  if (right_after_call_ && blank(text)) {
    pending_space_.append(text);
    return;
  }
  out.content.append(pending_space_);
  pending_space_.clear();
  out.content.append(text);
  right_after_call_ = false;
}

void ToolCallParser::finish_block(std::string_view body, bool closed, ToolCallDelta& out) {
  nlohmann::json j = nlohmann::json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  const bool ok = j.is_object() && j.contains("name") && j["name"].is_string() &&
                  (!j.contains("arguments") || j["arguments"].is_object() || j["arguments"].is_string());
  if (!ok) {
    emit_content(std::string(kOpen) + std::string(body) + (closed ? std::string(kClose) : ""), out);
    return;
  }
  ToolCall call;
  call.id = "call_" + id_prefix_ + std::to_string(next_index_++);
  call.name = j["name"].get<std::string>();
  if (!j.contains("arguments")) call.arguments = "{}";
  else if (j["arguments"].is_string()) call.arguments = j["arguments"].get<std::string>();
  else call.arguments = j["arguments"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  pending_space_.clear();  // the text between two calls is layout, not content
  right_after_call_ = true;
  out.calls.push_back(std::move(call));
}

ToolCallDelta ToolCallParser::push(std::string_view text) {
  ToolCallDelta d;
  held_.append(text);
  while (!held_.empty()) {
    if (!inside_) {
      const std::size_t at = held_.find(kOpen);
      if (at == std::string::npos) {
        const std::size_t keep = partial_suffix(held_, kOpen);
        emit_content(std::string_view(held_).substr(0, held_.size() - keep), d);
        held_.erase(0, held_.size() - keep);
        return d;
      }
      emit_content(std::string_view(held_).substr(0, at), d);
      held_.erase(0, at + kOpen.size());
      inside_ = true;
      continue;
    }
    const std::size_t at = held_.find(kClose);
    if (at == std::string::npos) return d;  // the whole block is needed before it can be parsed
    finish_block(std::string_view(held_).substr(0, at), /*closed=*/true, d);
    held_.erase(0, at + kClose.size());
    inside_ = false;
  }
  return d;
}

ToolCallDelta ToolCallParser::flush() {
  ToolCallDelta d;
  if (inside_) finish_block(held_, /*closed=*/false, d);
  else emit_content(held_, d);
  held_.clear();
  inside_ = false;
  pending_space_.clear();
  right_after_call_ = false;
  return d;
}

}  // namespace fp4serve::server
