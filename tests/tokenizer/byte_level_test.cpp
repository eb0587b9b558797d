// GPT-2's bytes_to_unicode table, checked against its definition and against the vocabulary.
#include <gtest/gtest.h>

#include <set>

#include "fixtures.h"
#include "tokenizer/byte_level.h"

namespace fp4serve::tokenizer::byte_level {
namespace {

TEST(ByteLevel, TableFollowsTheGpt2Definition) {
  std::set<char32_t> seen;
  char32_t next_extra = 256;
  for (int b = 0; b < 256; ++b) {
    const auto byte = static_cast<std::uint8_t>(b);
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    EXPECT_EQ(char_of(byte), printable ? static_cast<char32_t>(b) : next_extra++) << "byte " << b;
    EXPECT_TRUE(seen.insert(char_of(byte)).second);
    EXPECT_EQ(byte_of(char_of(byte)), byte);
  }
  EXPECT_EQ(utf8_of(' '), "\xC4\xA0");   // Ġ
  EXPECT_EQ(utf8_of('\n'), "\xC4\x8A");  // Ċ
  EXPECT_FALSE(byte_of(U'\u0144').has_value());
  EXPECT_FALSE(byte_of(U'\u00AD').has_value());  // soft hyphen is remapped, so not a stand-in
}

TEST(ByteLevel, EncodeDecodeRoundTripsEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  EXPECT_EQ(decode(encode(all)), all);
  EXPECT_FALSE(decode("\xCE\xA9").has_value());  // Ω is not a stand-in
}

// Every byte's stand-in is a token of the Qwen3 vocabulary (so no text is ever unencodable).
TEST(ByteLevel, EveryByteIsAQwen3Token) {
  const Tokenizer& tok = fixtures::qwen3();
  for (int b = 0; b < 256; ++b) {
    const auto id = tok.token_to_id(utf8_of(static_cast<std::uint8_t>(b)));
    ASSERT_TRUE(id.has_value()) << "byte " << b;
    EXPECT_EQ(tok.token_bytes(*id), std::string(1, static_cast<char>(b)));
  }
}

}  // namespace
}  // namespace fp4serve::tokenizer::byte_level
