// UTF-8 scanning and repair. Expected strings follow the Unicode "maximal subpart" practice, which
// Python's bytes.decode(errors="replace") and Rust's from_utf8_lossy implement.
#include <gtest/gtest.h>

#include "tokenizer/utf8.h"

namespace fp4serve::tokenizer::utf8 {
namespace {

const std::string kReplacement = "\xEF\xBF\xBD";

TEST(Utf8, RepairKeepsValidText) {
  const std::string text = "a\xC3\xA9\xE4\xB8\xAD\xF0\x9F\x98\x80";  // a é 中 😀
  EXPECT_EQ(repair(text), text);
  EXPECT_EQ(find_invalid(text), std::string::npos);
}

TEST(Utf8, RepairReplacesEachMaximalSubpart) {
  // A truncated 4-byte sequence is one subpart: one U+FFFD.
  EXPECT_EQ(repair("\xF0\x9F\x98"), kReplacement);
  // E0 needs A0..BF next, so E0 80 is two subparts.
  EXPECT_EQ(repair("\xE0\x80"), kReplacement + kReplacement);
  // Surrogates (ED A0..BF) and overlongs (C0, C1) are invalid byte by byte.
  EXPECT_EQ(repair("\xED\xA0\x80"), kReplacement + kReplacement + kReplacement);
  EXPECT_EQ(repair("\xC0\xAF"), kReplacement + kReplacement);
  // Above U+10FFFF.
  EXPECT_EQ(repair("\xF4\x90\x80\x80"), kReplacement + kReplacement + kReplacement + kReplacement);
  // A lone continuation byte between valid characters.
  EXPECT_EQ(repair("a\x80" "b"), "a" + kReplacement + "b");
  // A truncated sequence followed by ASCII: the ASCII survives.
  EXPECT_EQ(repair("\xE4\xB8x"), kReplacement + "x");
}

TEST(Utf8, ScanReportsIncompleteSequences) {
  EXPECT_EQ(scan("\xF0\x9F").verdict, Verdict::Incomplete);
  EXPECT_EQ(scan("\xF0\x9F").length, 2u);
  EXPECT_EQ(scan("\xF0\x9F\x98\x80").verdict, Verdict::Valid);
  EXPECT_EQ(scan("\xF0\x20").verdict, Verdict::Invalid);
  EXPECT_EQ(scan("\xF0\x20").length, 1u);
}

TEST(Utf8, FindInvalidPointsAtTheFirstBadByte) {
  EXPECT_EQ(find_invalid("ab\xFF" "cd"), 2u);
  EXPECT_EQ(find_invalid("\xC3\xA9\xC3"), 2u);
}

TEST(Utf8, NextAndAppendRoundTrip) {
  for (const char32_t cp : {U'\u0041', U'\u00E9', U'\u4E2D', U'\U0001F600', U'\U0010FFFF'}) {
    std::string s;
    append(s, cp);
    std::size_t pos = 0;
    EXPECT_EQ(next(s, pos), cp);
    EXPECT_EQ(pos, s.size());
  }
}

}  // namespace
}  // namespace fp4serve::tokenizer::utf8
