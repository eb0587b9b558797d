#include "tokenizer/decoder.h"

#include "tokenizer/byte_level.h"

namespace fp4serve::tokenizer {
namespace {

class ByteLevelDecoder final : public Decoder {
 public:
  std::string token_bytes(std::string_view token) const override {
    // A token with a character outside the stand-in alphabet (an added token such as "<think>"
    // is all stand-ins, but "Ω" is not) keeps its UTF-8 unchanged, as Hugging Face does.
    if (auto bytes = byte_level::decode(token)) return std::move(*bytes);
    return std::string(token);
  }
};

class JoinDecoder final : public Decoder {
 public:
  std::string token_bytes(std::string_view token) const override { return std::string(token); }
  std::string_view separator() const override { return " "; }
};

}  // namespace

std::unique_ptr<Decoder> make_decoder(const JsonField& field) {
  if (field.is_null()) return std::make_unique<JoinDecoder>();
  const std::string type = field.type();
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  field["type"].fail_here("unsupported decoder type '", type, "' (supported: ByteLevel)");
}

}  // namespace fp4serve::tokenizer
