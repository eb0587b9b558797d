#include "tokenizer/bpe.h"

#include <cstdio>
#include <mutex>
#include <queue>

#include "tokenizer/byte_level.h"
#include "tokenizer/utf8.h"

namespace fp4serve::tokenizer {

struct BpeModel::Symbol {
  std::uint32_t id;
  std::uint32_t length;  // bytes of the piece covered; 0 once merged into its left neighbour
  std::int32_t prev;
  std::int32_t next;
};

BpeModel::BpeModel(const JsonField& model, TokenizerJson& parsed) {
  const std::string type = model.has("type") ? model["type"].string() : "BPE";
  if (type != "BPE") model["type"].fail_here("unsupported model type '", type, "' (only BPE is supported)");
  if (model.has("dropout") && !model["dropout"].is_null() && model["dropout"].value().get<double>() != 0.0) {
    model["dropout"].fail_here("BPE dropout is a training feature and is not supported");
  }
  continuing_subword_prefix_ = model.string_or("continuing_subword_prefix", "");
  end_of_word_suffix_ = model.string_or("end_of_word_suffix", "");
  fuse_unk_ = model.boolean_or("fuse_unk", false);
  byte_fallback_ = model.boolean_or("byte_fallback", false);
  ignore_merges_ = model.boolean_or("ignore_merges", false);

  // The reader captured model.vocab only when it was an object; otherwise explain what is wrong.
  const JsonField vocab_field = model["vocab"];
  if (!parsed.vocab) vocab_field.fail_here("expected an object mapping token to id");
  if (parsed.vocab_error) vocab_field.fail_here(*parsed.vocab_error);
  vocab_.reserve(parsed.vocab->size());
  for (const VocabEntry& e : *parsed.vocab) vocab_.insert(e.token, e.id);
  parsed.vocab.reset();

  if (model.has("unk_token") && !model["unk_token"].is_null()) {
    const std::string unk = model["unk_token"].string();
    unk_id_ = lookup(unk);
    if (!unk_id_) model["unk_token"].fail_here("unk_token '", unk, "' is not in model.vocab");
  }

  for (int b = 0; b < 256; ++b) {
    const auto id = lookup(byte_level::utf8_of(static_cast<std::uint8_t>(b)));
    byte_ids_[b] = id ? static_cast<std::int64_t>(*id) : -1;
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    const auto fb = lookup(name);
    fallback_ids_[b] = fb ? static_cast<std::int64_t>(*fb) : -1;
  }

  const JsonField merges = model["merges"];
  if (!parsed.merges) merges.fail_here("expected an array of merges");
  const std::vector<MergeEntry>& list = *parsed.merges;
  merges_.reserve(list.size());
  const std::size_t prefix_len = continuing_subword_prefix_.size();
  std::string merged;
  for (std::size_t rank = 0; rank < list.size(); ++rank) {
    const MergeEntry& entry = list[rank];
    // Paths of single entries are built only on failure: there are ~150k of them.
    auto where = [&] { return merges.where() + "[" + std::to_string(rank) + "]"; };
    std::string_view left, right;
    if (entry.form == MergeEntry::Form::Line) {
      // "a b": exactly one space, as Hugging Face requires.
      const std::string& line = entry.left;
      const std::size_t space = line.find(' ');
      if (space == std::string::npos || line.find(' ', space + 1) != std::string::npos) {
        fail(where(), ": merge '", line, "' is not two tokens separated by one space");
      }
      left = std::string_view(line).substr(0, space);
      right = std::string_view(line).substr(space + 1);
    } else if (entry.form == MergeEntry::Form::Pair) {
      left = entry.left;
      right = entry.right;
    } else {
      fail(where(), ": expected a string \"a b\" or a pair [\"a\", \"b\"]");
    }
    const auto l = lookup(left), r = lookup(right);
    if (!l) fail(where(), ": merge token '", left, "' is not in model.vocab");
    if (!r) fail(where(), ": merge token '", right, "' is not in model.vocab");
    merged.assign(left);
    if (right.size() >= prefix_len) merged.append(right.substr(prefix_len));
    const auto m = lookup(merged);
    if (!m) fail(where(), ": merge result '", merged, "' is not in model.vocab");
    // A repeated pair keeps its last rank, as Hugging Face's map construction does.
    merges_.insert_or_assign(*l, *r, Merge{static_cast<std::uint32_t>(rank), *m});
  }
  parsed.merges.reset();
}

BpeModel::~BpeModel() = default;

std::optional<std::uint32_t> BpeModel::lookup(std::string_view token) const { return vocab_.find(token); }

std::optional<BpeModel::Merge> BpeModel::find_merge(std::uint32_t left, std::uint32_t right) const {
  const Merge* m = merges_.find(left, right);
  if (m == nullptr) return std::nullopt;
  return *m;
}

void BpeModel::encode(std::string_view piece, bool byte_level, std::vector<PieceToken>& out) const {
  if (piece.empty()) return;
  const bool cacheable = piece.size() <= kMaxCachedPiece;
  if (cacheable) {
    std::shared_lock lock(cache_mutex_);
    const auto it = cache_.find(piece);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const std::size_t first = out.size();
  encode_uncached(piece, byte_level, out);
  if (cacheable) {
    std::unique_lock lock(cache_mutex_);
    if (cache_.size() < kCacheCapacity) {
      cache_.emplace(std::string(piece), std::vector<PieceToken>(out.begin() + static_cast<std::ptrdiff_t>(first), out.end()));
    }
  }
}

void BpeModel::encode_uncached(std::string_view piece, bool byte_level, std::vector<PieceToken>& out) const {
  if (ignore_merges_) {
    const auto whole = byte_level ? lookup(byte_level::encode(piece)) : lookup(piece);
    if (whole) {
      out.push_back({*whole, static_cast<std::uint32_t>(piece.size())});
      return;
    }
  }
  std::vector<Symbol> symbols;
  initial_symbols(piece, byte_level, symbols);
  merge_all(symbols);
  for (const Symbol& s : symbols) {
    if (s.length != 0) out.push_back({s.id, s.length});
  }
}

void BpeModel::initial_symbols(std::string_view piece, bool byte_level, std::vector<Symbol>& symbols) const {
  symbols.reserve(piece.size());
  auto add = [&](std::uint32_t id, std::size_t length) {
    const auto index = static_cast<std::int32_t>(symbols.size());
    symbols.push_back({id, static_cast<std::uint32_t>(length), index - 1, index + 1});
  };
  // Fast path: every byte's stand-in is a token and no prefix/suffix decorates the symbols.
  if (byte_level && continuing_subword_prefix_.empty() && end_of_word_suffix_.empty()) {
    bool complete = true;
    for (const char ch : piece) complete = complete && byte_ids_[static_cast<std::uint8_t>(ch)] >= 0;
    if (complete) {
      for (const char ch : piece) add(static_cast<std::uint32_t>(byte_ids_[static_cast<std::uint8_t>(ch)]), 1);
      if (!symbols.empty()) symbols.back().next = -1;
      return;
    }
  }
  // General path, following Hugging Face's BPE::merge_word: one unit per byte (byte-level) or per
  // character; unknown units fall back to <0xXX> byte tokens, then to unk_token (fused if asked),
  // and are dropped when there is neither.
  // An unknown unit waiting to be emitted (kept back so fuse_unk can extend it).
  bool pending_unk = false;
  std::size_t pending_unk_length = 0;
  std::string unit;
  std::size_t pos = 0;
  bool first = true;
  while (pos < piece.size()) {
    const std::size_t begin = pos;
    if (byte_level) {
      ++pos;
    } else {
      utf8::next(piece, pos);
    }
    const std::size_t length = pos - begin;
    unit.clear();
    if (!first) unit += continuing_subword_prefix_;
    if (byte_level) {
      unit += byte_level::utf8_of(static_cast<std::uint8_t>(piece[begin]));
    } else {
      unit.append(piece.substr(begin, length));
    }
    if (pos == piece.size()) unit += end_of_word_suffix_;
    if (const auto id = lookup(unit)) {
      first = false;
      if (pending_unk) add(*unk_id_, pending_unk_length);
      pending_unk = false;
      add(*id, length);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (const char ch : unit) all = all && fallback_ids_[static_cast<std::uint8_t>(ch)] >= 0;
      if (all) {
        // Hugging Face leaves is_first set here, so the next unit gets no prefix either.
        for (const char ch : unit) add(static_cast<std::uint32_t>(fallback_ids_[static_cast<std::uint8_t>(ch)]), 1);
        continue;
      }
    }
    first = false;
    if (unk_id_) {
      if (pending_unk && fuse_unk_) {
        pending_unk_length += length;
      } else {
        if (pending_unk) add(*unk_id_, pending_unk_length);
        pending_unk = true;
        pending_unk_length = length;
      }
    }
  }
  if (pending_unk) add(*unk_id_, pending_unk_length);
  if (!symbols.empty()) symbols.back().next = -1;
}

void BpeModel::merge_all(std::vector<Symbol>& symbols) const {
  // Candidate merges ordered by rank, then leftmost position. Entries go stale when a neighbour
  // merges first; they are recognized on pop by re-checking the pair.
  struct Candidate {
    std::uint32_t rank;
    std::uint32_t pos;
    std::uint32_t merged;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  if (symbols.size() < 2) return;
  std::vector<Candidate> storage;
  storage.reserve(symbols.size());
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue(std::greater<>{}, std::move(storage));
  for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
    if (const auto m = find_merge(symbols[i].id, symbols[i + 1].id)) {
      queue.push({m->rank, static_cast<std::uint32_t>(i), m->merged});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (left.length == 0 || left.next < 0) continue;
    Symbol& right = symbols[static_cast<std::size_t>(left.next)];
    const auto current = find_merge(left.id, right.id);
    if (!current || current->merged != top.merged) continue;  // stale entry
    left.id = top.merged;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[static_cast<std::size_t>(right.next)].prev = static_cast<std::int32_t>(top.pos);
    if (left.prev >= 0) {
      const Symbol& before = symbols[static_cast<std::size_t>(left.prev)];
      if (const auto m = find_merge(before.id, left.id)) {
        queue.push({m->rank, static_cast<std::uint32_t>(left.prev), m->merged});
      }
    }
    if (left.next >= 0) {
      if (const auto m = find_merge(left.id, symbols[static_cast<std::size_t>(left.next)].id)) {
        queue.push({m->rank, top.pos, m->merged});
      }
    }
  }
}

}  // namespace fp4serve::tokenizer
