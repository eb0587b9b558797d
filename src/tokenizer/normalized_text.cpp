#include "tokenizer/normalized_text.h"

#include <algorithm>

#include "tokenizer/utf8.h"

namespace fp4serve::tokenizer {

Range NormalizedText::byte_origin(std::size_t pos) const {
  if (!align_.empty()) return align_[pos];
  const std::size_t b = utf8::char_start(text_, pos);
  const std::size_t e = utf8::char_end(text_, pos + 1);
  return {origin_ + b, origin_ + e};
}

Range NormalizedText::original_of_byte(std::size_t pos) const { return byte_origin(pos); }

Range NormalizedText::original(std::size_t begin, std::size_t end) const {
  if (begin >= end) {
    // An empty span sits where its neighbour starts (or at the end of the text).
    if (begin < text_.size()) return {byte_origin(begin).begin, byte_origin(begin).begin};
    const std::size_t last = text_.empty() ? origin_ : (align_.empty() ? origin_ + text_.size() : align_.back().end);
    return {last, last};
  }
  if (align_.empty()) {
    return {origin_ + utf8::char_start(text_, begin), origin_ + utf8::char_end(text_, end)};
  }
  Range r = align_[begin];
  for (std::size_t i = begin + 1; i < end; ++i) {
    r.begin = std::min(r.begin, align_[i].begin);
    r.end = std::max(r.end, align_[i].end);
  }
  return r;
}

void NormalizedText::Builder::append(std::string_view bytes, Range from) {
  text_.append(bytes);
  align_.insert(align_.end(), bytes.size(), from);
}

NormalizedText NormalizedText::Builder::finish() && {
  NormalizedText t;
  t.text_ = std::move(text_);
  t.align_ = std::move(align_);
  return t;
}

}  // namespace fp4serve::tokenizer
