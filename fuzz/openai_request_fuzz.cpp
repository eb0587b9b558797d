// libFuzzer target for what the server does with untrusted bytes before and after the model:
//   - request bodies: parse_chat_completion_request / parse_completion_request must either
//     accept or throw ApiError with a 4xx status and a message (anything else is a bug);
//   - streamed output: the stop-string matcher, the <think> parser and the <tool_call> parser
//     must give the same result whether the text arrives in one piece or split anywhere, and
//     the stop matcher must return exactly the text cut before the stop string that completes
//     first (ties: the longest).
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "server/api_error.h"
#include "server/openai_protocol.h"
#include "server/reasoning_parser.h"
#include "server/stop_strings.h"
#include "server/tool_call_parser.h"

namespace {

using namespace fp4serve::server;

void check(bool ok) {
  if (!ok) std::abort();
}

template <typename Parse>
void parse_request(Parse parse, std::string_view body) {
  try {
    parse(body);
  } catch (const ApiError& e) {
    check(e.status() >= 400 && e.status() < 500 && e.what()[0] != '\0');
  }
}

// Feeds `text` in pieces cut at `cuts` (sorted offsets) and returns the concatenated results.
std::vector<std::string_view> pieces(std::string_view text, const std::vector<std::size_t>& cuts) {
  std::vector<std::string_view> out;
  std::size_t at = 0;
  for (std::size_t c : cuts) {
    out.push_back(text.substr(at, c - at));
    at = c;
  }
  out.push_back(text.substr(at));
  return out;
}

std::string stop_output(std::string_view text, const std::vector<std::string>& stops,
                        const std::vector<std::size_t>& cuts) {
  StopMatcher m(stops);
  std::string out;
  for (std::string_view p : pieces(text, cuts)) out += m.push(p).text;
  if (!m.stopped()) out += m.flush();
  return out;
}

std::string reasoning_output(std::string_view text, bool in_reasoning, const std::vector<std::size_t>& cuts) {
  ReasoningParser r(in_reasoning);
  std::string reasoning, content;
  auto add = [&](const ReasoningDelta& d) {
    reasoning += d.reasoning;
    content += d.content;
  };
  for (std::string_view p : pieces(text, cuts)) add(r.push(p));
  add(r.flush());
  return reasoning + '\x01' + content;
}

// Content and calls apart: a response carries them in separate fields, so only each one's
// order matters, not how they interleave within one delta.
std::string tool_output(std::string_view text, const std::vector<std::size_t>& cuts) {
  ToolCallParser t("fuzz");
  std::string content, calls;
  auto add = [&](const ToolCallDelta& d) {
    content += d.content;
    for (const ToolCall& c : d.calls) calls += '\x01' + c.id + '\x02' + c.name + '\x03' + c.arguments + '\x04';
  };
  for (std::string_view p : pieces(text, cuts)) add(t.push(p));
  add(t.flush());
  return content + '\x05' + calls;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  parse_request([](std::string_view b) { parse_chat_completion_request(b); }, text);
  parse_request([](std::string_view b) { parse_completion_request(b); }, text);
  if (size < 3) return 0;

  // Cuts derived from the first bytes; stop strings are short slices of the text itself, so
  // they do occur (and straddle cuts).
  std::vector<std::size_t> cuts{data[0] % (size + 1), data[1] % (size + 1), (data[0] * 7u + data[2]) % (size + 1)};
  std::sort(cuts.begin(), cuts.end());
  const std::size_t a = data[1] % size, b = data[2] % size;
  const std::vector<std::string> stops{std::string(text.substr(a, 1 + data[0] % 5)),
                                       std::string(text.substr(b, 1 + data[2] % 3))};

  std::size_t cut = text.size(), end = std::string_view::npos;
  for (const std::string& s : stops) {
    const std::size_t at = text.find(s);
    if (at == std::string_view::npos) continue;
    if (at + s.size() < end || (at + s.size() == end && at < cut)) {
      cut = at;
      end = at + s.size();
    }
  }
  check(stop_output(text, stops, cuts) == text.substr(0, cut));

  for (bool in_reasoning : {false, true})
    check(reasoning_output(text, in_reasoning, cuts) == reasoning_output(text, in_reasoning, {}));
  check(tool_output(text, cuts) == tool_output(text, {}));
  return 0;
}
