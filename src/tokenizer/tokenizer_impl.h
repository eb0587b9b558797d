#pragma once
// Internal state of a Tokenizer, shared by tokenizer_load.cpp (building it from JSON) and
// tokenizer.cpp (running it).
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe.h"
#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace fp4serve::tokenizer {

struct Tokenizer::Impl {
  std::string source;  // file name, for error messages
  std::unique_ptr<Normalizer> normalizer;
  std::unique_ptr<PreTokenizer> pre_tokenizer;
  std::unique_ptr<BpeModel> model;
  std::unique_ptr<Decoder> decoder;
  bool byte_level = false;  // the pre-tokenizer hands the model raw bytes
  // ByteLevel post-processor with trim_offsets: offsets exclude a token's leading/trailing spaces.
  bool trim_offsets = false;
  bool trim_add_prefix_space = false;

  AddedTokenMatcher raw_added;         // "normalized": false, found in the raw text
  AddedTokenMatcher normalized_added;  // "normalized": true, found in the normalized text

  // Indexed by id; `known` is false for holes in the id space.
  std::vector<std::string> id_to_token;
  std::vector<std::string> token_bytes;
  std::vector<bool> known;
  std::vector<bool> special;
  TokenIndex added_ids;  // added token content -> id
  std::size_t vocab_size = 0;

  void encode(std::string_view text, bool parse_special, std::vector<TokenId>& ids,
              std::vector<TokenSpan>* offsets) const;
  void check_id(TokenId id) const;
};

}  // namespace fp4serve::tokenizer
