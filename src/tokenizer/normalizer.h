#pragma once
// tokenizer.json "normalizer": rewrites each stretch of text between added tokens before
// pre-tokenization. Supported: NFC, NFD, NFKC, NFKD, Sequence, Replace, Prepend.
#include <memory>
#include <string>

#include "tokenizer/json_field.h"
#include "tokenizer/normalized_text.h"

namespace fp4serve::tokenizer {

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual NormalizedText apply(NormalizedText text) const = 0;
  // Normalizes a plain string (used for the content of added tokens marked "normalized").
  std::string apply_plain(const std::string& text) const { return apply(NormalizedText(text, 0)).text(); }
};

// Builds the normalizer described by `field` (an object with "type"), or null for JSON null.
// Throws Error naming the file and field for unknown types or malformed members.
std::unique_ptr<Normalizer> make_normalizer(const JsonField& field);

}  // namespace fp4serve::tokenizer
