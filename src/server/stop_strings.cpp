#include "server/stop_strings.h"

#include <algorithm>

#include "server/partial_match.h"

namespace fp4serve::server {

StopMatcher::StopMatcher(std::vector<std::string> stops) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

StopMatcher::Result StopMatcher::push(std::string_view piece) {
  Result r;
  if (stopped_) return r;
  held_.append(piece);
  if (stops_.empty()) {
    r.text.swap(held_);
    return r;
  }
  // The earliest complete match wins; among matches at the same place, the longest.
  std::size_t best = std::string::npos;
  for (const std::string& s : stops_) {
    const std::size_t at = held_.find(s);
    if (at == std::string::npos) continue;
    if (at < best || (at == best && s.size() > matched_.size())) {
      best = at;
      matched_ = s;
    }
  }
  if (best != std::string::npos) {
    r.text = held_.substr(0, best);
    r.stopped = stopped_ = true;
    held_.clear();
    return r;
  }
  // Keep the longest suffix of held_ that is a proper prefix of some stop string.
  std::size_t keep = 0;
  for (const std::string& s : stops_) keep = std::max(keep, partial_suffix(held_, s));
  r.text = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return r;
}

std::string StopMatcher::flush() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace fp4serve::server
