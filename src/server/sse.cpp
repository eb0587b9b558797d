#include "server/sse.h"

namespace fp4serve::server {

std::string to_json_text(const nlohmann::ordered_json& value) {
  return value.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string sse_event(const nlohmann::ordered_json& data) { return "data: " + to_json_text(data) + "\n\n"; }

std::string sse_done() { return "data: [DONE]\n\n"; }

std::string sse_comment(const std::string& text) {
  std::string out = ": ";
  for (char c : text) out.push_back(c == '\n' || c == '\r' ? ' ' : c);
  return out + "\n\n";
}

}  // namespace fp4serve::server
