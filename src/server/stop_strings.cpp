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
  // The match that completes first wins (generation stops the moment a stop string appears);
  // among those ending at the same place, the longest. Held-back text always contains every
  // partial match, so this does not depend on how the output was cut into pieces.
  std::size_t best = std::string::npos, best_end = std::string::npos;
  for (const std::string& s : stops_) {
    const std::size_t at = held_.find(s);
    if (at == std::string::npos) continue;
    const std::size_t end = at + s.size();
    if (end < best_end || (end == best_end && at < best)) {
      best = at;
      best_end = end;
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
