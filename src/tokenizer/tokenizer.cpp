// Running a loaded Tokenizer: encode (added tokens, normalize, pre-tokenize, BPE) and decode.
#include "tokenizer/tokenizer.h"

#include <algorithm>

#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace fp4serve::tokenizer {
namespace {

// Hugging Face's ByteLevel process_offsets: shrink offsets past the spaces ("Ġ", or real
// whitespace that an added token absorbed) a token starts or ends with, except the single space
// that add_prefix_space itself put before the first token. The Python binding (what transformers
// users see) runs this on character offsets, so the moves here are by whole characters.
// `values` are the token strings as Hugging Face holds them (an added token with the whitespace
// that lstrip/rstrip took).
void trim_offsets(std::string_view text, const std::vector<std::string>& values, std::vector<TokenSpan>& offsets,
                  bool add_prefix_space) {
  auto is_space = [](char32_t c) { return c == 0x120 || unicode::is_whitespace(c); };
  auto forward = [&](std::size_t pos, std::size_t chars) {
    for (; chars > 0 && pos < text.size(); --chars) pos = utf8::char_end(text, pos + 1);
    return pos;
  };
  auto backward = [&](std::size_t pos, std::size_t chars) {
    for (; chars > 0 && pos > 0; --chars) pos = utf8::char_start(text, pos - 1);
    return pos;
  };
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::string& token = values[i];
    std::size_t leading = 0, trailing = 0, pos = 0;
    while (pos < token.size() && is_space(utf8::next(token, pos))) ++leading;
    for (std::size_t end = token.size(); end > 0; ++trailing) {
      std::size_t b = utf8::char_start(token, end - 1), p = b;
      if (!is_space(utf8::next(token, p))) break;
      end = b;
    }
    TokenSpan& o = offsets[i];
    if (leading > 0) {
      const bool first = i == 0 || o.begin == 0;
      if (first && add_prefix_space && leading == 1) leading = 0;
      o.begin = std::min(forward(o.begin, leading), o.end);
    }
    if (trailing > 0 && o.end >= trailing) o.end = std::max(backward(o.end, trailing), o.begin);
  }
}

}  // namespace

void Tokenizer::Impl::encode(std::string_view text, bool parse_special, std::vector<TokenId>& ids,
                             std::vector<TokenSpan>* offsets) const {
  if (const std::size_t bad = utf8::find_invalid(text); bad != std::string_view::npos) {
    fail("text to tokenize is not valid UTF-8 (byte ", bad, ")");
  }
  std::vector<Segment> segments;
  if (raw_added.empty()) {
    if (!text.empty()) segments.push_back({0, text.size(), std::nullopt});
  } else {
    raw_added.split(text, parse_special, segments);
  }

  // Token strings as Hugging Face holds them, only needed to trim offsets.
  std::vector<std::string> value_storage;
  std::vector<std::string>* values = offsets && trim_offsets ? &value_storage : nullptr;
  std::vector<Segment> inner;
  std::vector<Split> splits;
  std::vector<PieceToken> pieces;
  std::string buffer;
  for (const Segment& seg : segments) {
    if (seg.id) {
      ids.push_back(*seg.id);
      if (offsets) offsets->push_back({seg.begin, seg.end});
      if (values) values->emplace_back(text.substr(seg.begin, seg.end - seg.begin));
      continue;
    }
    NormalizedText nt(text.substr(seg.begin, seg.end - seg.begin), seg.begin);
    if (normalizer) nt = normalizer->apply(std::move(nt));
    const std::string& norm = nt.text();
    inner.clear();
    if (normalized_added.empty()) {
      if (!norm.empty()) inner.push_back({0, norm.size(), std::nullopt});
    } else {
      normalized_added.split(norm, parse_special, inner);
    }
    for (const Segment& part : inner) {
      if (part.id) {
        ids.push_back(*part.id);
        if (offsets) {
          const Range r = nt.original(part.begin, part.end);
          offsets->push_back({r.begin, r.end});
        }
        if (values) values->push_back(norm.substr(part.begin, part.end - part.begin));
        continue;
      }
      splits.assign(1, Split{part.begin, part.end, false});
      if (pre_tokenizer) pre_tokenizer->apply(norm, splits);
      for (const Split& split : splits) {
        pieces.clear();
        model->encode(split_text(norm, split, buffer), byte_level, pieces);
        std::size_t v = 0;  // position in the piece, which counts the synthetic space if any
        const std::size_t shift = split.prefix_space ? 1 : 0;
        for (const PieceToken& p : pieces) {
          ids.push_back(p.id);
          if (offsets) {
            const std::size_t nb = split.begin + (v > shift ? v - shift : 0);
            const std::size_t ne = split.begin + (v + p.length > shift ? v + p.length - shift : 0);
            Range r = nt.original(nb, ne);
            // The synthetic space maps to the first character of the piece it was prepended to
            // (which starts at split.begin even when a later split left this piece only the space).
            if (v < shift && split.begin < norm.size()) {
              const Range first = nt.original_of_byte(split.begin);
              r = ne > nb ? Range{std::min(r.begin, first.begin), std::max(r.end, first.end)} : first;
            }
            offsets->push_back({r.begin, r.end});
          }
          if (values) values->push_back(id_to_token[p.id]);
          v += p.length;
        }
      }
    }
  }
  if (values) ::fp4serve::tokenizer::trim_offsets(text, *values, *offsets, trim_add_prefix_space);
}

void Tokenizer::Impl::check_id(TokenId id) const {
  if (id >= known.size() || !known[id]) {
    fail("token id ", id, " is not in the vocabulary of ", source, " (ids go up to ", known.size() - 1, ")");
  }
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

std::vector<TokenId> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<TokenId> ids;
  ids.reserve(text.size() / 3 + 1);
  impl_->encode(text, parse_special, ids, nullptr);
  return ids;
}

Encoding Tokenizer::encode_with_offsets(std::string_view text, bool parse_special) const {
  Encoding e;
  impl_->encode(text, parse_special, e.ids, &e.offsets);
  return e;
}

std::string Tokenizer::decode(std::span<const TokenId> ids, bool skip_special) const {
  std::string bytes;
  const std::string_view sep = impl_->decoder->separator();
  bool first = true;
  for (const TokenId id : ids) {
    impl_->check_id(id);
    if (skip_special && impl_->special[id]) continue;
    if (!first) bytes.append(sep);
    bytes.append(impl_->token_bytes[id]);
    first = false;
  }
  return utf8::repair(bytes);
}

std::optional<std::string_view> Tokenizer::id_to_token(TokenId id) const {
  if (!has_token(id)) return std::nullopt;
  return impl_->id_to_token[id];
}

bool Tokenizer::has_token(std::int64_t id) const {
  return id >= 0 && static_cast<std::uint64_t>(id) < impl_->known.size() && impl_->known[static_cast<std::size_t>(id)];
}

std::optional<TokenId> Tokenizer::token_to_id(std::string_view token) const {
  // Added tokens first (they may shadow a vocabulary entry), then the model's vocabulary.
  if (const auto id = impl_->added_ids.find(token)) return id;
  return impl_->model->vocab().find(token);
}

const std::string& Tokenizer::token_bytes(TokenId id) const {
  impl_->check_id(id);
  return impl_->token_bytes[id];
}

bool Tokenizer::is_special(TokenId id) const { return id < impl_->special.size() && impl_->special[id]; }
std::string_view Tokenizer::decode_separator() const { return impl_->decoder->separator(); }
std::size_t Tokenizer::id_limit() const { return impl_->known.size(); }
std::size_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

}  // namespace fp4serve::tokenizer
