#pragma once
// UTF-8 primitives shared by the tokenizer: decoding one code point, validation, and the
// "maximal subpart" replacement rule that Python's bytes.decode(errors="replace") and Rust's
// String::from_utf8_lossy both follow, so decoded text matches Hugging Face byte for byte.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fp4serve::tokenizer::utf8 {

// Length of the UTF-8 sequence announced by a lead byte (1 for ASCII and for invalid leads).
inline std::size_t sequence_length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

// Decodes the code point starting at `pos` in valid UTF-8 and advances `pos` past it.
char32_t next(std::string_view s, std::size_t& pos);

// Appends the UTF-8 encoding of `cp` to `out`.
void append(std::string& out, char32_t cp);

// Byte offset of the first invalid sequence, or npos when `s` is valid UTF-8.
std::size_t find_invalid(std::string_view s);

// Classifies the bytes at the start of `s`:
//  - Valid: a complete character of `length` bytes;
//  - Invalid: `length` bytes form a maximal invalid subpart, replaced by one U+FFFD;
//  - Incomplete: the whole of `s` (length bytes) is a proper prefix of a valid character, so the
//    verdict needs more bytes (a streaming decoder waits; at end of input it is one U+FFFD).
enum class Verdict { Valid, Invalid, Incomplete };
struct Scan {
  Verdict verdict;
  std::size_t length;
};
Scan scan(std::string_view s);

// Replaces every maximal invalid subpart by U+FFFD (from_utf8_lossy semantics).
std::string repair(std::string_view bytes);

// Byte offset where the character containing byte `pos` starts (valid UTF-8 assumed).
inline std::size_t char_start(std::string_view s, std::size_t pos) {
  while (pos > 0 && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) --pos;
  return pos;
}
// Byte offset just past the character containing byte `pos - 1` (valid UTF-8 assumed).
inline std::size_t char_end(std::string_view s, std::size_t pos) {
  while (pos < s.size() && (static_cast<unsigned char>(s[pos]) & 0xC0) == 0x80) ++pos;
  return pos;
}

}  // namespace fp4serve::tokenizer::utf8
