#include "tokenizer/unicode.h"

#include <utf8proc.h>

#include <cstdint>
#include <cstdlib>
#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace fp4serve::tokenizer::unicode {
namespace {


constexpr char32_t kMaxCodePoint = 0x10FFFF;

int combining_class(char32_t c) {
  return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->combining_class;
}

// Per-form tables of inert characters, derived once from utf8proc's own data (so they follow the
// library's Unicode version) in a few milliseconds.
struct InertTables {
  std::vector<bool> composed;     // NFC
  std::vector<bool> compat;       // NFKC
  std::vector<bool> decomposed;   // NFD and NFKD
  InertTables() : composed(kMaxCodePoint + 1), compat(kMaxCodePoint + 1), decomposed(kMaxCodePoint + 1) {
    // Characters that a composition can attach to the character before them while having class 0
    // themselves (Hangul vowels and trailing consonants, some Indic vowel signs).
    std::vector<bool> combines_backward(kMaxCodePoint + 1, false);
    utf8proc_int32_t buf[32];
    auto decompose = [&](char32_t c, bool with_compat) {
      int boundclass = 0;
      const int options = UTF8PROC_DECOMPOSE | (with_compat ? UTF8PROC_COMPAT : 0);
      return utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buf, 32,
                                     static_cast<utf8proc_option_t>(options), &boundclass);
    };
    auto has_decomposition = [](char32_t c) {
      return utf8proc_get_property(static_cast<utf8proc_int32_t>(c))->decomp_seqindex != UINT16_MAX ||
             (c >= 0xAC00 && c <= 0xD7A3);  // Hangul syllables decompose algorithmically
    };
    for (char32_t c = 0x80; c <= kMaxCodePoint; ++c) {
      if (!has_decomposition(c)) continue;
      const utf8proc_ssize_t n = decompose(c, false);
      for (utf8proc_ssize_t i = 1; i < n; ++i) {
        if (combining_class(static_cast<char32_t>(buf[i])) == 0) combines_backward[static_cast<char32_t>(buf[i])] = true;
      }
    }
    // A decomposable character is inert for a composing form when it comes back unchanged and
    // its decomposition starts with a starter that cannot join what precedes it.
    auto recomposes_to_itself = [&](char32_t c, bool with_compat) {
      const utf8proc_ssize_t n = decompose(c, with_compat);
      if (n < 1 || combining_class(static_cast<char32_t>(buf[0])) != 0 || combines_backward[static_cast<char32_t>(buf[0])]) {
        return false;
      }
      std::string one;
      utf8::append(one, c);
      return normalize(one, with_compat ? Form::NFKC : Form::NFC) == one;
    };
    for (char32_t c = 0; c <= kMaxCodePoint; ++c) {
      if (c < 0x80) {
        composed[c] = compat[c] = decomposed[c] = true;
        continue;
      }
      if ((c >= 0xD800 && c <= 0xDFFF) || combining_class(c) != 0 || combines_backward[c]) continue;
      if (!has_decomposition(c)) {
        composed[c] = compat[c] = decomposed[c] = true;
        continue;
      }
      composed[c] = recomposes_to_itself(c, false);
      compat[c] = recomposes_to_itself(c, true);
    }
  }
};

const InertTables& inert_tables() {
  static const InertTables tables;
  return tables;
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

bool is_inert(char32_t c, Form form) {
  if (c < 0x80) return true;
  if (c > kMaxCodePoint) return false;
  const InertTables& t = inert_tables();
  switch (form) {
    case Form::NFC: return t.composed[c];
    case Form::NFKC: return t.compat[c];
    case Form::NFD:
    case Form::NFKD: return t.decomposed[c];
  }
  return false;
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

namespace {

// The primary composite of <a, b>, if any. utf8proc has no pair lookup, so compose the pair and
// see whether one character comes out; callers only ask for pairs the composition algorithm
// allows (b not blocked from a), where this is exactly the primary composite.
std::optional<char32_t> compose_pair(char32_t a, char32_t b) {
  std::string pair;
  utf8::append(pair, a);
  utf8::append(pair, b);
  const std::string composed = normalize(pair, Form::NFC);
  std::size_t pos = 0;
  const char32_t c = utf8::next(composed, pos);
  if (pos != composed.size()) return std::nullopt;
  return c;
}

}  // namespace

std::vector<Aligned> normalize_aligned(std::string_view text, Form form) {
  const bool compat = form == Form::NFKC || form == Form::NFKD;
  const bool compose = form == Form::NFC || form == Form::NFKC;
  std::vector<Aligned> items;
  utf8proc_int32_t buf[32];
  std::size_t pos = 0;
  while (pos < text.size()) {
    const char32_t c = utf8::next(text, pos);
    int last_boundclass = 0;
    const int options = UTF8PROC_DECOMPOSE | (compat ? UTF8PROC_COMPAT : 0);
    const utf8proc_ssize_t n = utf8proc_decompose_char(static_cast<utf8proc_int32_t>(c), buf, 32,
                                                       static_cast<utf8proc_option_t>(options), &last_boundclass);
    if (n < 1 || n > 32) fail("Unicode decomposition failed for U+", std::hex, static_cast<std::uint32_t>(c));
    for (utf8proc_ssize_t i = 0; i < n; ++i) items.push_back({static_cast<char32_t>(buf[i]), i == 0 ? 0 : 1});
  }
  // Canonical ordering: stable sort of each run of non-starters by combining class.
  for (std::size_t i = 0; i < items.size();) {
    if (combining_class(items[i].c) == 0) {
      ++i;
      continue;
    }
    std::size_t j = i;
    while (j < items.size() && combining_class(items[j].c) != 0) ++j;
    std::stable_sort(items.begin() + static_cast<std::ptrdiff_t>(i), items.begin() + static_cast<std::ptrdiff_t>(j),
                     [](const Aligned& x, const Aligned& y) { return combining_class(x.c) < combining_class(y.c); });
    i = j;
  }
  if (!compose) return items;
  // Canonical composition (UAX #15 D117): a character joins the last starter unless a character
  // between them has combining class 0 or one at least its own.
  std::vector<Aligned> out;
  std::optional<std::size_t> starter;
  int last_ccc = -1;  // class of the last character kept after the starter, -1 if none
  for (const Aligned& item : items) {
    const int ccc = combining_class(item.c);
    if (starter && last_ccc < ccc) {  // -1 (adjacent) never blocks
      if (const auto p = compose_pair(out[*starter].c, item.c)) {
        out[*starter].c = *p;
        out[*starter].change += item.change - 1;
        continue;
      }
    }
    out.push_back(item);
    if (ccc == 0) {
      starter = out.size() - 1;
      last_ccc = -1;
    } else {
      last_ccc = ccc;
    }
  }
  return out;
}

}  // namespace fp4serve::tokenizer::unicode
