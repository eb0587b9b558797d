#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace fp4serve::tokenizer {
namespace {

char32_t last_char(std::string_view s) {
  std::size_t pos = utf8::char_start(s, s.size() - 1);
  return utf8::next(s, pos);
}

// Byte offset where the trailing whitespace of `s` begins (s.size() if none).
std::size_t trailing_space_start(std::string_view s) {
  std::size_t end = s.size();
  while (end > 0) {
    const std::size_t b = utf8::char_start(s, end - 1);
    std::size_t p = b;
    if (!unicode::is_whitespace(utf8::next(s, p))) break;
    end = b;
  }
  return end;
}

// Length of the leading whitespace of `s`.
std::size_t leading_space_length(std::string_view s) {
  std::size_t pos = 0;
  while (pos < s.size()) {
    std::size_t p = pos;
    if (!unicode::is_whitespace(utf8::next(s, p))) break;
    pos = p;
  }
  return pos;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns)
    : tokens_(std::move(tokens)), patterns_(std::move(patterns)) {
  trie_.emplace_back();
  for (std::size_t t = 0; t < patterns_.size(); ++t) {
    const std::string& p = patterns_[t];
    if (p.empty()) continue;  // an empty token can never be matched
    first_byte_[static_cast<unsigned char>(p[0])] = true;
    std::uint32_t node = 0;
    for (const char ch : p) {
      const auto byte = static_cast<unsigned char>(ch);
      auto& kids = trie_[node].children;
      auto it = std::find_if(kids.begin(), kids.end(), [&](const auto& e) { return e.first == byte; });
      if (it == kids.end()) {
        const auto child = static_cast<std::uint32_t>(trie_.size());
        trie_[node].children.emplace_back(byte, child);
        trie_.emplace_back();
        node = child;
      } else {
        node = it->second;
      }
    }
    // Two tokens with the same text: the first one listed wins, like a vocabulary lookup.
    if (!trie_[node].token) trie_[node].token = t;
  }
}

std::optional<std::size_t> AddedTokenMatcher::longest_at(std::string_view text, std::size_t pos) const {
  std::optional<std::size_t> best;
  std::uint32_t node = 0;
  for (std::size_t i = pos; i < text.size(); ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    const auto& kids = trie_[node].children;
    auto it = std::find_if(kids.begin(), kids.end(), [&](const auto& e) { return e.first == byte; });
    if (it == kids.end()) break;
    node = it->second;
    if (trie_[node].token) best = trie_[node].token;
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, bool parse_special, std::vector<Segment>& out) const {
  out.clear();
  std::size_t emitted = 0;  // end of the last segment pushed
  std::size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto t = longest_at(text, pos);
    if (!t) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[*t];
    std::size_t start = pos;
    std::size_t stop = pos + patterns_[*t].size();
    // The match is consumed even when it is rejected below, as Hugging Face's aho-corasick
    // iterator does: the scan resumes after it.
    pos = stop;
    if (!parse_special && token.special) continue;
    if (token.single_word) {
      const bool word_before = start > 0 && unicode::is_alphanumeric(last_char(text.substr(0, start)));
      std::size_t p = stop;
      const bool word_after = stop < text.size() && unicode::is_alphanumeric(utf8::next(text, p));
      if (word_before || word_after) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), emitted);
    if (token.rstrip) stop += leading_space_length(text.substr(stop));
    if (emitted < start) out.push_back({emitted, start, std::nullopt});
    out.push_back({start, stop, token.id});
    emitted = stop;
    pos = std::max(pos, stop);
  }
  if (emitted < text.size()) out.push_back({emitted, text.size(), std::nullopt});
}

}  // namespace fp4serve::tokenizer
