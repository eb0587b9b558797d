#pragma once
// Stop strings over streamed text. Generated text arrives in pieces; a stop string may straddle
// pieces, so the matcher holds back the longest tail of what it has seen that could still grow
// into a stop string, and releases it only once it cannot. The client therefore never sees any
// part of a stop string, and the text it sees is exactly the full output cut before the stop
// string that completes first (the moment generation stops), however the output was cut.
#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace fp4serve::server {

class StopMatcher {
 public:
  // Empty strings are ignored (they would match everywhere).
  explicit StopMatcher(std::vector<std::string> stops);

  struct Result {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string matched; `text` ends right before it
  };
  // Feeds the next piece. After a stop, further pieces yield nothing.
  Result push(std::string_view piece);
  // The text still held back, at the end of the stream (no stop string can complete now).
  std::string flush();
  bool stopped() const { return stopped_; }
  // The stop string that matched, empty if none did.
  const std::string& matched() const { return matched_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
  std::string matched_;
};

}  // namespace fp4serve::server
