#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <functional>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace fp4serve::tokenizer {

std::string_view split_text(std::string_view text, const Split& split, std::string& buffer) {
  const std::string_view body = text.substr(split.begin, split.end - split.begin);
  if (!split.prefix_space) return body;
  buffer.assign(1, ' ');
  buffer.append(body);
  return buffer;
}

namespace {

// How the matched parts of a piece are kept, as in Hugging Face's SplitDelimiterBehavior.
enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const JsonField& field) {
  const std::string b = field.string();
  if (b == "Removed") return Behavior::Removed;
  if (b == "Isolated") return Behavior::Isolated;
  if (b == "MergedWithPrevious") return Behavior::MergedWithPrevious;
  if (b == "MergedWithNext") return Behavior::MergedWithNext;
  if (b == "Contiguous") return Behavior::Contiguous;
  field.fail_here("unknown split behavior '", b,
                  "' (expected Removed, Isolated, MergedWithPrevious, MergedWithNext or Contiguous)");
}

// A stretch of a piece's text and whether the pattern matched it.
struct Part {
  std::size_t begin;
  std::size_t end;
  bool is_match;
};

// Lists the matched and unmatched stretches covering all of `s`.
using Matcher = std::function<void(std::string_view s, std::vector<Part>& parts)>;

// Applies `behavior` to the parts of one piece; returns stretches to keep, in piece coordinates.
void keep_parts(const std::vector<Part>& parts, Behavior behavior, std::vector<Part>& kept) {
  kept.clear();
  bool previous_match = false;
  switch (behavior) {
    case Behavior::Isolated:
      kept = parts;
      break;
    case Behavior::Removed:
      for (const Part& p : parts)
        if (!p.is_match) kept.push_back(p);
      break;
    case Behavior::Contiguous:
      for (const Part& p : parts) {
        if (p.is_match == previous_match && !kept.empty()) {
          kept.back().end = p.end;
        } else {
          kept.push_back(p);
        }
        previous_match = p.is_match;
      }
      break;
    case Behavior::MergedWithPrevious:
      for (const Part& p : parts) {
        if (p.is_match && !previous_match && !kept.empty()) {
          kept.back().end = p.end;
        } else {
          kept.push_back(p);
        }
        previous_match = p.is_match;
      }
      break;
    case Behavior::MergedWithNext:
      // Walk backwards so a delimiter joins the stretch after it.
      for (auto it = parts.rbegin(); it != parts.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty()) {
          kept.back().begin = it->begin;
        } else {
          kept.push_back(*it);
        }
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
}

// Re-splits every piece with `matcher` and `behavior`, mapping sub-stretches back to splits.
void split_all(std::string_view text, std::vector<Split>& splits, const Matcher& matcher, Behavior behavior,
               bool invert) {
  std::vector<Split> out;
  out.reserve(splits.size() * 2);
  std::vector<Part> parts;
  std::vector<Part> kept;
  std::string buffer;
  for (const Split& split : splits) {
    const std::string_view s = split_text(text, split, buffer);
    parts.clear();
    matcher(s, parts);
    if (invert)
      for (Part& p : parts) p.is_match = !p.is_match;
    keep_parts(parts, behavior, kept);
    const std::size_t shift = split.prefix_space ? 1 : 0;
    for (const Part& p : kept) {
      if (p.end == p.begin) continue;
      Split sub;
      sub.prefix_space = split.prefix_space && p.begin == 0;
      sub.begin = split.begin + (p.begin > 0 ? p.begin - shift : 0);
      sub.end = split.begin + p.end - shift;
      out.push_back(sub);
    }
  }
  splits = std::move(out);
}

Matcher regex_matcher(std::shared_ptr<const Regex> regex) {
  return [regex = std::move(regex)](std::string_view s, std::vector<Part>& parts) {
    std::size_t prev = 0;
    regex->for_each_match(s, [&](std::size_t b, std::size_t e) {
      if (prev != b) parts.push_back({prev, b, false});
      parts.push_back({b, e, true});
      prev = e;
    });
    if (prev != s.size()) parts.push_back({prev, s.size(), false});
  };
}

// Every character satisfying `pred` is its own match (Hugging Face's char-predicate pattern).
Matcher char_matcher(bool (*pred)(char32_t)) {
  return [pred](std::string_view s, std::vector<Part>& parts) {
    std::size_t pos = 0, prev = 0;
    while (pos < s.size()) {
      const std::size_t b = pos;
      if (pred(utf8::next(s, pos))) {
        if (prev != b) parts.push_back({prev, b, false});
        parts.push_back({b, pos, true});
        prev = pos;
      }
    }
    if (prev != s.size()) parts.push_back({prev, s.size(), false});
  };
}

class SplitPreTokenizer final : public PreTokenizer {
 public:
  SplitPreTokenizer(Matcher matcher, Behavior behavior, bool invert)
      : matcher_(std::move(matcher)), behavior_(behavior), invert_(invert) {}
  void apply(std::string_view text, std::vector<Split>& splits) const override {
    split_all(text, splits, matcher_, behavior_, invert_);
  }

 private:
  Matcher matcher_;
  Behavior behavior_;
  bool invert_;
};

// The GPT-2 pattern ByteLevel uses when "use_regex" is true.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer final : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex, const std::string& where)
      : add_prefix_space_(add_prefix_space) {
    if (use_regex) matcher_ = regex_matcher(std::make_shared<const Regex>(kGpt2Pattern, false, where));
  }
  void apply(std::string_view text, std::vector<Split>& splits) const override {
    if (add_prefix_space_) {
      for (Split& s : splits) {
        if (!s.prefix_space && text[s.begin] != ' ') s.prefix_space = true;
      }
    }
    if (matcher_) split_all(text, splits, matcher_, Behavior::Isolated, false);
  }
  bool byte_level() const override { return true; }

 private:
  bool add_prefix_space_;
  Matcher matcher_;
};

class SequencePreTokenizer final : public PreTokenizer {
 public:
  explicit SequencePreTokenizer(std::vector<std::unique_ptr<PreTokenizer>> steps) : steps_(std::move(steps)) {
    for (const auto& s : steps_) byte_level_ = byte_level_ || s->byte_level();
  }
  void apply(std::string_view text, std::vector<Split>& splits) const override {
    for (const auto& step : steps_) step->apply(text, splits);
  }
  bool byte_level() const override { return byte_level_; }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> steps_;
  bool byte_level_ = false;
};

std::unique_ptr<PreTokenizer> make_step(const JsonField& field) {
  const std::string type = field.type();
  if (type == "Split") {
    auto regex = std::make_shared<const Regex>(make_pattern(field["pattern"]));
    return std::make_unique<SplitPreTokenizer>(regex_matcher(std::move(regex)), parse_behavior(field["behavior"]),
                                               field.boolean_or("invert", false));
  }
  if (type == "ByteLevel") {
    return std::make_unique<ByteLevelPreTokenizer>(field.boolean_or("add_prefix_space", true),
                                                   field.boolean_or("use_regex", true), field.where());
  }
  if (type == "Digits") {
    const bool individual = field.boolean_or("individual_digits", false);
    return std::make_unique<SplitPreTokenizer>(char_matcher(&unicode::is_numeric),
                                               individual ? Behavior::Isolated : Behavior::Contiguous, false);
  }
  if (type == "Sequence") {
    const JsonField list = field["pretokenizers"];
    std::vector<std::unique_ptr<PreTokenizer>> steps;
    bool seen_byte_level = false;
    for (std::size_t i = 0; i < list.array_size(); ++i) {
      auto step = make_step(list.at(i));
      // Hugging Face runs later steps on the stand-in characters; no real tokenizer does this
      // and supporting it would mean materializing them, so refuse it loudly.
      if (seen_byte_level && !step->byte_level()) {
        list.at(i).fail_here("a ", list.at(i).type(), " step after ByteLevel is not supported");
      }
      seen_byte_level = seen_byte_level || step->byte_level();
      steps.push_back(std::move(step));
    }
    return std::make_unique<SequencePreTokenizer>(std::move(steps));
  }
  field["type"].fail_here("unsupported pre-tokenizer type '", type,
                          "' (supported: Split, ByteLevel, Digits, Sequence)");
}

}  // namespace

std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonField& field) {
  if (field.is_null()) return nullptr;
  return make_step(field);
}

}  // namespace fp4serve::tokenizer
