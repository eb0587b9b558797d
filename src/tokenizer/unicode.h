#pragma once
// Unicode character classes and normalization forms, as Hugging Face tokenizers (Rust) define
// them: char::is_whitespace, is_alphanumeric, is_numeric, and NFC/NFD/NFKC/NFKD. Backed by utf8proc.
#include <string>
#include <string_view>

namespace fp4serve::tokenizer::unicode {

bool is_whitespace(char32_t c);    // the White_Space property (Rust char::is_whitespace)
bool is_numeric(char32_t c);       // general category Nd, Nl or No (Rust char::is_numeric)
// Letters, marks or numbers. Rust's is_alphanumeric uses the Alphabetic property, which adds
// Other_Alphabetic marks; utf8proc has no such table, so every mark counts here.
bool is_alphanumeric(char32_t c);

enum class Form { NFC, NFD, NFKC, NFKD };

// Normalizes valid UTF-8 text to `form`.
std::string normalize(std::string_view text, Form form);

// True when no normalization form can change the character or merge it with a neighbour: it has
// no decomposition, combining class 0, and is never the second half of a canonical composition.
// A text of inert characters is already normalized, and a normalization boundary lies before
// every inert character, so the normalizers only work on the short runs between them.
bool is_inert(char32_t c);

}  // namespace fp4serve::tokenizer::unicode
