#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "util/error.h"

namespace fp4serve::tokenizer::unicode {
namespace {

constexpr char32_t kMaxCodePoint = 0x10FFFF;

// Characters that a canonical composition can attach to the character before them while having
// combining class 0 themselves (Hangul vowels and trailing consonants, some Indic vowel signs).
// Derived once from utf8proc's own decompositions, so it follows the library's Unicode version.
const std::vector<bool>& starters_that_combine_backward() {
  static const std::vector<bool> table = [] {
    std::vector<bool> t(kMaxCodePoint + 1, false);
    utf8proc_int32_t buf[8];
    for (char32_t c = 0x80; c <= kMaxCodePoint; ++c) {
      const auto cp = static_cast<utf8proc_int32_t>(c);
      const utf8proc_property_t* p = utf8proc_get_property(cp);
      // Hangul syllables decompose algorithmically and have no decomp_seqindex.
      const bool hangul = c >= 0xAC00 && c <= 0xD7A3;
      if (p->decomp_seqindex == UINT16_MAX && !hangul) continue;
      int last_boundclass = 0;
      const utf8proc_ssize_t n = utf8proc_decompose_char(cp, buf, 8, UTF8PROC_DECOMPOSE, &last_boundclass);
      for (utf8proc_ssize_t i = 1; i < n; ++i) {
        if (utf8proc_get_property(buf[i])->combining_class == 0) t[static_cast<char32_t>(buf[i])] = true;
      }
    }
    return t;
  }();
  return table;
}

}  // namespace

bool is_whitespace(char32_t c) {
  switch (c) {
    case 0x09: case 0x0A: case 0x0B: case 0x0C: case 0x0D: case 0x20: case 0x85: case 0xA0:
    case 0x1680: case 0x2028: case 0x2029: case 0x202F: case 0x205F: case 0x3000:
      return true;
    default:
      return c >= 0x2000 && c <= 0x200A;
  }
}

bool is_numeric(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return cat == UTF8PROC_CATEGORY_ND || cat == UTF8PROC_CATEGORY_NL || cat == UTF8PROC_CATEGORY_NO;
}

bool is_alphanumeric(char32_t c) {
  const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
  return (cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_NO);
}

bool is_inert(char32_t c) {
  if (c < 0x80) return true;
  if (c > kMaxCodePoint) return false;
  const utf8proc_property_t* p = utf8proc_get_property(static_cast<utf8proc_int32_t>(c));
  if (p->combining_class != 0 || p->decomp_seqindex != UINT16_MAX) return false;
  if (c >= 0x1100 && c <= 0x11FF) return false;  // Hangul jamo compose algorithmically
  if (c >= 0xAC00 && c <= 0xD7A3) return false;  // Hangul syllables decompose algorithmically
  return !starters_that_combine_backward()[c];
}

std::string normalize(std::string_view text, Form form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case Form::NFC: options |= UTF8PROC_COMPOSE; break;
    case Form::NFD: options |= UTF8PROC_DECOMPOSE; break;
    case Form::NFKC: options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT; break;
    case Form::NFKD: options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT; break;
  }
  utf8proc_uint8_t* out = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(text.data()),
                                          static_cast<utf8proc_ssize_t>(text.size()), &out,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0) fail("Unicode normalization failed: ", utf8proc_errmsg(n));
  std::unique_ptr<utf8proc_uint8_t, decltype(&std::free)> guard(out, &std::free);
  return std::string(reinterpret_cast<const char*>(out), static_cast<std::size_t>(n));
}

}  // namespace fp4serve::tokenizer::unicode
