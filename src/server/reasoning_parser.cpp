#include "server/reasoning_parser.h"

#include "server/partial_match.h"

namespace fp4serve::server {

namespace {

constexpr std::string_view kOpen = "<think>";
constexpr std::string_view kClose = "</think>";

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::size_t leading_space(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

}  // namespace

ReasoningParser::ReasoningParser(bool starts_in_reasoning)
    : state_(starts_in_reasoning ? State::Reasoning : State::Start) {}

ReasoningDelta ReasoningParser::push(std::string_view text) {
  ReasoningDelta d;
  held_.append(text);
  // Each state consumes what it can and either moves on (loop again) or holds the rest.
  while (!held_.empty()) {
    switch (state_) {
      case State::Start: {
        // Only an opening tag at the very start (after blank space) begins reasoning.
        const std::string_view rest = std::string_view(held_).substr(leading_space(held_));
        if (rest.size() >= kOpen.size()) {
          if (rest.substr(0, kOpen.size()) == kOpen) {
            held_.erase(0, held_.size() - rest.size() + kOpen.size());
            state_ = State::Reasoning;
          } else {
            state_ = State::Content;
          }
          continue;
        }
        if (kOpen.substr(0, rest.size()) == rest) return d;  // could still become <think>
        state_ = State::Content;
        continue;
      }
      case State::Reasoning: {
        const std::size_t at = held_.find(kClose);
        if (at != std::string::npos) {
          d.reasoning.append(held_, 0, at);
          held_.erase(0, at + kClose.size());
          state_ = State::AfterReasoning;
          continue;
        }
        const std::size_t keep = partial_suffix(held_, kClose);
        d.reasoning.append(held_, 0, held_.size() - keep);
        held_.erase(0, held_.size() - keep);
        return d;
      }
      case State::AfterReasoning: {
        // The blank lines the model puts between </think> and its answer are not content.
        const std::size_t n = leading_space(held_);
        held_.erase(0, n);
        if (held_.empty()) return d;
        state_ = State::Content;
        continue;
      }
      case State::Content:
        d.content.append(held_);
        held_.clear();
        return d;
    }
  }
  return d;
}

ReasoningDelta ReasoningParser::flush() {
  ReasoningDelta d;
  if (state_ == State::Reasoning) d.reasoning.swap(held_);
  else if (state_ != State::AfterReasoning) d.content.swap(held_);
  held_.clear();
  return d;
}

bool prompt_opens_reasoning(std::string_view prompt) {
  std::size_t end = prompt.size();
  while (end > 0 && is_space(prompt[end - 1])) --end;
  const std::string_view body = prompt.substr(0, end);
  return body.size() >= kOpen.size() && body.substr(body.size() - kOpen.size()) == kOpen;
}

}  // namespace fp4serve::server
