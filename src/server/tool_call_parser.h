#pragma once
// Qwen3 tool calls: the model answers a request that has `tools` with one or more
//   <tool_call>
//   {"name": "get_weather", "arguments": {"city": "Paris"}}
//   </tool_call>
// blocks. The parser turns streamed content into plain content plus complete tool calls, each
// delivered once its closing tag arrives (one OpenAI delta then carries the whole call). A block
// whose JSON is not a {"name", "arguments"} object is passed through as content, so nothing the
// model wrote is lost.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fp4serve::server {

struct ToolCall {
  std::string id;         // "call_<prefix><index>"
  std::string name;
  std::string arguments;  // a JSON object as text, as OpenAI returns it
};

struct ToolCallDelta {
  std::string content;
  std::vector<ToolCall> calls;
};

class ToolCallParser {
 public:
  // `id_prefix` makes the call ids unique across requests.
  explicit ToolCallParser(std::string id_prefix);
  ToolCallDelta push(std::string_view text);
  ToolCallDelta flush();  // end of output; an unterminated block is parsed if it is complete JSON
  std::size_t calls() const { return next_index_; }

 private:
  // Appends a call parsed from the body of one block to `out`, or the raw block as content.
  void finish_block(std::string_view body, bool closed, ToolCallDelta& out);
  void emit_content(std::string_view text, ToolCallDelta& out);

  std::string id_prefix_;
  std::string held_;
  bool inside_ = false;
  std::size_t next_index_ = 0;
  std::string pending_space_;      // blank text after a call, emitted only if real content follows
  bool right_after_call_ = false;  // no content emitted since the last call
};

}  // namespace fp4serve::server
