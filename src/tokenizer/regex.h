#pragma once
// The regular expressions of tokenizer.json (pre-tokenizer Split, Replace normalizer), compiled
// with PCRE2 in UTF + UCP mode so \p{L}, \s and (?i:...) follow Unicode like Oniguruma does in
// Hugging Face tokenizers. JIT-compiled: the regex is a large share of encode time.
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/json_field.h"

namespace fp4serve::tokenizer {

class Regex {
 public:
  // `literal` matches the pattern as plain text (the {"String": ...} form of a pattern).
  // Throws Error naming `where` and the PCRE2 message with its offset for a bad pattern.
  Regex(std::string_view pattern, bool literal, const std::string& where);
  ~Regex();
  Regex(Regex&&) noexcept;
  Regex& operator=(Regex&&) noexcept;

  // Calls on_match(begin, end) for each successive non-overlapping match in valid UTF-8 text,
  // left to right. An empty match advances by one character, like Oniguruma's find_iter.
  void for_each_match(std::string_view text,
                      const std::function<void(std::size_t, std::size_t)>& on_match) const;

  const std::string& pattern() const { return pattern_; }

 private:
  struct Code;
  std::string pattern_;
  std::unique_ptr<Code> code_;
};

// The {"Regex": "..."} or {"String": "..."} pattern object of Split and Replace.
Regex make_pattern(const JsonField& field);

}  // namespace fp4serve::tokenizer
