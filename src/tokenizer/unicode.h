#pragma once
// Unicode character classes and normalization forms, as Hugging Face tokenizers (Rust) define
// them: char::is_whitespace, is_alphanumeric, is_numeric, and NFC/NFD/NFKC/NFKD. Backed by utf8proc.
#include <string>
#include <string_view>
#include <vector>

namespace fp4serve::tokenizer::unicode {

bool is_whitespace(char32_t c);    // the White_Space property (Rust char::is_whitespace)
bool is_numeric(char32_t c);       // general category Nd, Nl or No (Rust char::is_numeric)
// Letters, marks or numbers. Rust's is_alphanumeric uses the Alphabetic property, which adds
// Other_Alphabetic marks; utf8proc has no such table, so every mark counts here.
bool is_alphanumeric(char32_t c);

enum class Form { NFC, NFD, NFKC, NFKD };

// Normalizes valid UTF-8 text to `form`.
std::string normalize(std::string_view text, Form form);

// One character of a normalization result with Hugging Face's alignment bookkeeping
// (unicode-normalization-alignments): `change` is 0 for a character that replaces the next input
// character, +1 for one inserted after it (the tail of a decomposition), and -n when it also
// swallows n further input characters (a composition).
struct Aligned {
  char32_t c;
  int change;
};
// Normalizes the characters of `text` with that bookkeeping: full decomposition, canonical
// reordering (characters carry their change), then canonical composition for NFC/NFKC.
std::vector<Aligned> normalize_aligned(std::string_view text, Form form);

// True when `form` leaves the character unchanged and a normalization boundary lies before it:
// combining class 0, never the second half of a composition, and either no decomposition or (for
// NFC/NFKC) one that recomposes to the character itself, as precomposed letters and Hangul
// syllables do. A text of inert characters is already normalized, and the normalizers only work
// on the short runs that start at one inert character and end before the next.
bool is_inert(char32_t c, Form form);

}  // namespace fp4serve::tokenizer::unicode
