#pragma once
// tokenizer.json "model" of type BPE: the vocabulary, the ranked merges, and the merge loop that
// turns one pre-tokenized piece into token ids. Byte-level pieces start from one symbol per byte
// through a 256-entry table; merging uses a priority queue over a linked list of symbols, so a long
// word costs O(n log n) rather than the O(n^2) of rescanning for the best pair after every merge.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/flat_maps.h"
#include "tokenizer/json_field.h"
#include "tokenizer/json_reader.h"

namespace fp4serve::tokenizer {

// One token of a piece: its id and how many bytes of the piece it covers.
struct PieceToken {
  std::uint32_t id;
  std::uint32_t length;
};

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

class BpeModel {
 public:
  // Reads the options from `model` and takes the vocabulary and merges (strings "a b" or pairs
  // ["a","b"]) that the reader captured from it. Throws Error naming the file and field for a
  // merge whose parts or result are not in the vocabulary.
  BpeModel(const JsonField& model, TokenizerJson& parsed);
  ~BpeModel();

  // Encodes one piece. With `byte_level`, the piece is raw bytes shown to the vocabulary through
  // their stand-in characters; otherwise it is UTF-8 text split into characters.
  void encode(std::string_view piece, bool byte_level, std::vector<PieceToken>& out) const;

  const TokenIndex& vocab() const { return vocab_; }

 private:
  using Merge = PairMap::Value;
  struct Symbol;

  void encode_uncached(std::string_view piece, bool byte_level, std::vector<PieceToken>& out) const;
  void initial_symbols(std::string_view piece, bool byte_level, std::vector<Symbol>& symbols) const;
  void merge_all(std::vector<Symbol>& symbols) const;
  std::optional<Merge> find_merge(std::uint32_t left, std::uint32_t right) const;
  std::optional<std::uint32_t> lookup(std::string_view token) const;

  TokenIndex vocab_;
  PairMap merges_;
  std::optional<std::uint32_t> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool fuse_unk_ = false;
  bool byte_fallback_ = false;
  bool ignore_merges_ = false;
  // Id of each byte's stand-in character, or -1 when the vocabulary lacks it.
  std::int64_t byte_ids_[256];
  // Id of each <0xXX> token, for byte_fallback.
  std::int64_t fallback_ids_[256];

  // Piece -> tokens, filled as words are seen. Bounded so a stream of unique words cannot grow it
  // without limit; once full, new words are simply not cached (as in Hugging Face).
  static constexpr std::size_t kCacheCapacity = 1 << 16;
  static constexpr std::size_t kMaxCachedPiece = 256;
  mutable std::shared_mutex cache_mutex_;
  mutable std::unordered_map<std::string, std::vector<PieceToken>, StringHash, std::equal_to<>> cache_;
};

}  // namespace fp4serve::tokenizer
