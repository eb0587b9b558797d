#pragma once
// tokenizer.json "added_tokens": strings (special tokens such as <|im_end|>, and others such as
// <think>) that are cut out of the text whole before the BPE model sees it. Tokens with
// "normalized": false are found in the raw text; those with "normalized": true in the normalized
// text. Matching is leftmost-longest, then the flags single_word, lstrip and rstrip apply.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp4serve::tokenizer {

struct AddedToken {
  std::uint32_t id = 0;
  std::string content;
  bool special = false;
  bool normalized = false;
  bool lstrip = false;
  bool rstrip = false;
  bool single_word = false;
};

// A stretch of text that is either an added token (`id` set) or ordinary text.
struct Segment {
  std::size_t begin;
  std::size_t end;
  std::optional<std::uint32_t> id;
};

class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // `patterns[i]` is the text to find for `tokens[i]` (its content, normalized if need be).
  AddedTokenMatcher(std::vector<AddedToken> tokens, std::vector<std::string> patterns);

  bool empty() const { return tokens_.empty(); }

  // Cuts `text` into segments covering it. With parse_special false, special tokens are not
  // recognized (Hugging Face's encode_special_tokens), but non-special added tokens still are.
  void split(std::string_view text, bool parse_special, std::vector<Segment>& out) const;

 private:
  // The longest pattern starting at `pos`, as an index into tokens_.
  std::optional<std::size_t> longest_at(std::string_view text, std::size_t pos) const;

  std::vector<AddedToken> tokens_;
  std::vector<std::string> patterns_;
  // Byte trie over the patterns: node -> 256 children would be large, so edges are sorted lists.
  struct Node {
    std::vector<std::pair<unsigned char, std::uint32_t>> children;
    std::optional<std::size_t> token;  // a pattern ends here
  };
  std::vector<Node> trie_;
  bool first_byte_[256] = {};
};

}  // namespace fp4serve::tokenizer
