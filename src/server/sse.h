#pragma once
// Server-sent events as OpenAI streams them: one "data: <json>\n\n" event per chunk and a final
// "data: [DONE]\n\n".
#include <string>

#include <nlohmann/json.hpp>

namespace fp4serve::server {

// Compact JSON; invalid UTF-8 (a token that is half a character) becomes U+FFFD instead of
// throwing, so no generated text can break a response.
std::string to_json_text(const nlohmann::ordered_json& value);

std::string sse_event(const nlohmann::ordered_json& data);
std::string sse_done();
// A comment line: clients ignore it; writing it tells whether the client is still there.
std::string sse_comment(const std::string& text);

}  // namespace fp4serve::server
