#include "tokenizer/byte_level.h"

#include "tokenizer/utf8.h"

namespace fp4serve::tokenizer::byte_level {
namespace {

// Stand-ins are below U+0144, so the reverse map is a small array (-1: not a stand-in).
constexpr char32_t kStandInLimit = 256 + 68;

struct Tables {
  std::array<char32_t, 256> chars{};
  std::array<std::string, 256> utf8{};
  std::array<int, kStandInLimit> bytes{};
  Tables() {
    bytes.fill(-1);
    char32_t next_extra = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      chars[static_cast<std::size_t>(b)] = printable ? static_cast<char32_t>(b) : next_extra++;
      utf8::append(utf8[static_cast<std::size_t>(b)], chars[static_cast<std::size_t>(b)]);
      bytes[chars[static_cast<std::size_t>(b)]] = b;
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t char_of(std::uint8_t byte) { return tables().chars[byte]; }
const std::string& utf8_of(std::uint8_t byte) { return tables().utf8[byte]; }

std::optional<std::uint8_t> byte_of(char32_t c) {
  if (c >= kStandInLimit || tables().bytes[c] < 0) return std::nullopt;
  return static_cast<std::uint8_t>(tables().bytes[c]);
}

std::string encode(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (const char ch : bytes) out += utf8_of(static_cast<std::uint8_t>(ch));
  return out;
}

std::optional<std::string> decode(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  std::size_t pos = 0;
  while (pos < text.size()) {
    const auto b = byte_of(utf8::next(text, pos));
    if (!b) return std::nullopt;
    out += static_cast<char>(*b);
  }
  return out;
}

}  // namespace fp4serve::tokenizer::byte_level
