#pragma once
// GPT-2's bytes_to_unicode: every byte gets a printable stand-in character so that BPE vocabularies
// can be stored as text. Printable Latin-1 bytes map to themselves; the other 68 bytes (controls,
// space, 0x7F-0xA0, 0xAD) map to U+0100 onwards in byte order. "Ġ" (U+0120) is the space.
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fp4serve::tokenizer::byte_level {

// The stand-in character of `byte`, as a code point and as UTF-8.
char32_t char_of(std::uint8_t byte);
const std::string& utf8_of(std::uint8_t byte);

// The byte a stand-in character represents, if it is one.
std::optional<std::uint8_t> byte_of(char32_t c);

// Maps raw bytes to their stand-in text ("a b" -> "aĠb").
std::string encode(std::string_view bytes);

// Maps stand-in text back to bytes. Returns nullopt when a character is not a stand-in (Hugging
// Face then keeps that token's UTF-8 unchanged).
std::optional<std::string> decode(std::string_view text);

}  // namespace fp4serve::tokenizer::byte_level
