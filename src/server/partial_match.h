#pragma once
// The helper every streaming text parser here needs: how much of the end of the text seen so far
// could be the start of a marker that the next piece completes, and so must be held back.
#include <algorithm>
#include <cstddef>
#include <string_view>

namespace fp4serve::server {

// Length of the longest suffix of `text` that is a proper prefix of `marker`.
inline std::size_t partial_suffix(std::string_view text, std::string_view marker) {
  if (marker.empty()) return 0;
  for (std::size_t n = std::min(marker.size() - 1, text.size()); n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

}  // namespace fp4serve::server
