#pragma once
// Text after normalization plus, for every byte, the byte range of the input it came from, so a
// token's offsets can point into the caller's original text (Hugging Face's NormalizedString).
// The common case (NFC of text that is already NFC) keeps no per-byte table at all.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace fp4serve::tokenizer {

struct Range {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool operator==(const Range&) const = default;
};

class NormalizedText {
 public:
  NormalizedText() = default;
  // Unchanged text that starts at byte `origin` of the original input.
  NormalizedText(std::string_view text, std::size_t origin) : text_(text), origin_(origin) {}

  const std::string& text() const { return text_; }
  bool identity() const { return align_.empty(); }

  // The original byte range of the normalized character(s) covering bytes [begin, end): the union
  // of the ranges of every character touched, as Hugging Face reports a token made of part of a
  // multi-byte character.
  Range original(std::size_t begin, std::size_t end) const;
  // Original range of the character containing normalized byte `pos`.
  Range original_of_byte(std::size_t pos) const;

  // Rebuilding: append normalized bytes that all come from the original range `from`.
  class Builder {
   public:
    void append(std::string_view bytes, Range from);
    NormalizedText finish() &&;

   private:
    std::string text_;
    std::vector<Range> align_;
  };
  // The original range of each byte (materialized if identity), for transformations that rebuild.
  Range byte_origin(std::size_t pos) const;

 private:
  std::string text_;
  std::size_t origin_ = 0;
  std::vector<Range> align_;  // one per byte of text_, empty when identity
};

}  // namespace fp4serve::tokenizer
