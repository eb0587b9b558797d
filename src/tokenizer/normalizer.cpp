#include "tokenizer/normalizer.h"

#include <vector>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace fp4serve::tokenizer {
namespace {

// NFC / NFD / NFKC / NFKD. Text made only of inert characters (all ASCII, most CJK) is returned
// as is; otherwise each run from one inert character up to the next is normalized on its own.
// Inert characters are normalization boundaries, so this equals normalizing the whole text, and
// it gives every output character the original range of its run.
class UnicodeNormalizer final : public Normalizer {
 public:
  explicit UnicodeNormalizer(unicode::Form form) : form_(form) {}

  NormalizedText apply(NormalizedText in) const override {
    const std::string& s = in.text();
    if (all_inert(s)) return in;
    NormalizedText::Builder out;
    std::size_t run_begin = 0;
    std::size_t pos = 0;
    bool run_inert = true;  // the run so far is a single inert character (or empty)
    auto flush = [&](std::size_t run_end) {
      if (run_end == run_begin) return;
      const std::string_view run(s.data() + run_begin, run_end - run_begin);
      std::string normalized;
      if (!run_inert) normalized = unicode::normalize(run, form_);
      if (run_inert || normalized == run) {
        // Unchanged (precomposed text): every byte keeps its own origin.
        for (std::size_t i = 0; i < run.size(); ++i) out.append(run.substr(i, 1), in.byte_origin(run_begin + i));
      } else {
        append_aligned(in, run_begin, run, normalized, out);
      }
    };
    while (pos < s.size()) {
      const std::size_t char_begin = pos;
      const char32_t c = utf8::next(s, pos);
      if (unicode::is_inert(c, form_)) {
        flush(char_begin);
        run_begin = char_begin;
        run_inert = true;
      } else {
        run_inert = false;
      }
    }
    flush(s.size());
    return std::move(out).finish();
  }

 private:
  // Appends the normalization of `run` (which starts at byte `run_begin` of `in`) with the
  // alignments Hugging Face computes: walking the input characters in order, a character with
  // change <= 0 takes the next input character's origin and skips -change more; an inserted one
  // (+1) takes the origin of the input character just consumed.
  void append_aligned(const NormalizedText& in, std::size_t run_begin, std::string_view run,
                      const std::string& normalized, NormalizedText::Builder& out) const {
    const std::vector<unicode::Aligned> items = unicode::normalize_aligned(run, form_);
    std::string text;
    for (const auto& item : items) utf8::append(text, item.c);
    if (text != normalized) {
      // Our replay of the algorithm disagrees with utf8proc (should not happen): keep utf8proc's
      // text, which decides the ids, and map it to the whole run.
      out.append(normalized, in.original(run_begin, run_begin + run.size()));
      return;
    }
    std::vector<Range> origins;  // origin of each input character of the run
    for (std::size_t pos = 0; pos < run.size();) {
      origins.push_back(in.byte_origin(run_begin + pos));
      utf8::next(run, pos);
    }
    std::size_t consumed = 0;
    std::string bytes;
    for (const auto& item : items) {
      Range origin;
      if (item.change > 0) {
        origin = consumed > 0 ? origins[consumed - 1] : origins.front();
      } else {
        origin = origins[std::min(consumed, origins.size() - 1)];
        consumed += 1 + static_cast<std::size_t>(-item.change);
      }
      bytes.clear();
      utf8::append(bytes, item.c);
      out.append(bytes, origin);
    }
  }

  bool all_inert(const std::string& s) const {
    std::size_t pos = 0;
    while (pos < s.size()) {
      if (static_cast<unsigned char>(s[pos]) < 0x80) {
        ++pos;
        continue;
      }
      if (!unicode::is_inert(utf8::next(s, pos), form_)) return false;
    }
    return true;
  }
  unicode::Form form_;
};

class SequenceNormalizer final : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> steps) : steps_(std::move(steps)) {}
  NormalizedText apply(NormalizedText text) const override {
    for (const auto& step : steps_) text = step->apply(std::move(text));
    return text;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> steps_;
};

// Replaces every match of a pattern by fixed content; the content maps to the matched range.
class ReplaceNormalizer final : public Normalizer {
 public:
  ReplaceNormalizer(Regex pattern, std::string content) : pattern_(std::move(pattern)), content_(std::move(content)) {}
  NormalizedText apply(NormalizedText in) const override {
    const std::string& s = in.text();
    NormalizedText::Builder out;
    std::size_t copied = 0;
    bool any = false;
    pattern_.for_each_match(s, [&](std::size_t b, std::size_t e) {
      any = true;
      for (std::size_t i = copied; i < b; ++i) out.append(std::string_view(s).substr(i, 1), in.byte_origin(i));
      // Hugging Face inserts the content after removing the match, so every new character takes
      // the origin of the last matched character.
      out.append(content_, e > b ? in.byte_origin(e - 1) : (b > 0 ? in.byte_origin(b - 1) : Range{}));
      copied = e;
    });
    if (!any) return in;
    for (std::size_t i = copied; i < s.size(); ++i) out.append(std::string_view(s).substr(i, 1), in.byte_origin(i));
    return std::move(out).finish();
  }

 private:
  Regex pattern_;
  std::string content_;
};

// Adds a fixed prefix to non-empty text; the prefix maps to the first character.
class PrependNormalizer final : public Normalizer {
 public:
  explicit PrependNormalizer(std::string prefix) : prefix_(std::move(prefix)) {}
  NormalizedText apply(NormalizedText in) const override {
    const std::string& s = in.text();
    if (s.empty()) return in;
    NormalizedText::Builder out;
    out.append(prefix_, in.byte_origin(0));
    for (std::size_t i = 0; i < s.size(); ++i) out.append(std::string_view(s).substr(i, 1), in.byte_origin(i));
    return std::move(out).finish();
  }

 private:
  std::string prefix_;
};

}  // namespace

std::unique_ptr<Normalizer> make_normalizer(const JsonField& field) {
  if (field.is_null()) return nullptr;
  const std::string type = field.type();
  if (type == "NFC") return std::make_unique<UnicodeNormalizer>(unicode::Form::NFC);
  if (type == "NFD") return std::make_unique<UnicodeNormalizer>(unicode::Form::NFD);
  if (type == "NFKC") return std::make_unique<UnicodeNormalizer>(unicode::Form::NFKC);
  if (type == "NFKD") return std::make_unique<UnicodeNormalizer>(unicode::Form::NFKD);
  if (type == "Sequence") {
    const JsonField list = field["normalizers"];
    std::vector<std::unique_ptr<Normalizer>> steps;
    for (std::size_t i = 0; i < list.array_size(); ++i) {
      if (auto step = make_normalizer(list.at(i))) steps.push_back(std::move(step));
    }
    return std::make_unique<SequenceNormalizer>(std::move(steps));
  }
  if (type == "Replace") {
    return std::make_unique<ReplaceNormalizer>(make_pattern(field["pattern"]), field["content"].string());
  }
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(field["prepend"].string());
  field["type"].fail_here("unsupported normalizer type '", type,
                          "' (supported: NFC, NFD, NFKC, NFKD, Sequence, Replace, Prepend)");
}

}  // namespace fp4serve::tokenizer
