#pragma once
// tokenizer.json "decoder": turns tokens back into bytes. Supported: ByteLevel (stand-in
// characters back to bytes) and null (Hugging Face then joins the token strings with spaces).
// Both act on each token independently, which is what lets the streaming detokenizer emit text
// token by token and still equal a full decode.
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/json_field.h"

namespace fp4serve::tokenizer {

class Decoder {
 public:
  virtual ~Decoder() = default;
  // The bytes one token contributes (possibly a partial UTF-8 character).
  virtual std::string token_bytes(std::string_view token) const = 0;
  // Inserted between consecutive tokens.
  virtual std::string_view separator() const { return {}; }
};

// Builds the decoder for `field`; JSON null gives the space-joining decoder.
std::unique_ptr<Decoder> make_decoder(const JsonField& field);

}  // namespace fp4serve::tokenizer
