#pragma once
// tokenizer.json "pre_tokenizer": cuts normalized text into the pieces ("words") that the BPE model
// encodes independently. Supported: Split (regex or string, every behavior, invert), ByteLevel
// (add_prefix_space, use_regex), Digits, Sequence.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/json_field.h"

namespace fp4serve::tokenizer {

// One piece: bytes [begin, end) of the normalized text, optionally preceded by a synthetic space
// that ByteLevel(add_prefix_space) inserted (it belongs to no original byte).
struct Split {
  std::size_t begin = 0;
  std::size_t end = 0;
  bool prefix_space = false;

  std::size_t size() const { return end - begin + (prefix_space ? 1 : 0); }
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  // Replaces `splits` (pieces of `text`) by their sub-pieces. Empty pieces are dropped.
  virtual void apply(std::string_view text, std::vector<Split>& splits) const = 0;
  // True when the pieces reach the model as byte-level stand-in characters (a ByteLevel step ran).
  virtual bool byte_level() const { return false; }
};

// Builds the pre-tokenizer described by `field`, or null for JSON null. Throws Error naming the
// file and field for unknown types, bad regexes and unsupported combinations.
std::unique_ptr<PreTokenizer> make_pre_tokenizer(const JsonField& field);

// The text a split stands for (with its synthetic space), using `buffer` when one is needed.
std::string_view split_text(std::string_view text, const Split& split, std::string& buffer);

}  // namespace fp4serve::tokenizer
