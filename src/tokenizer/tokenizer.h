#pragma once
// A Hugging Face tokenizer.json, loaded and run in C++ with the same results as the `tokenizers`
// library: byte-level BPE (Qwen2/Qwen3/Qwen3.5 and GPT-2 style), added and special tokens,
// normalizers, pre-tokenizers and the ByteLevel decoder. Encoding is thread-safe.
//
// Pipeline of encode(): added tokens are cut out of the raw text first; each stretch between them
// is normalized, cut into pieces by the pre-tokenizer, and each piece is BPE-encoded.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fp4serve::tokenizer {

using TokenId = std::uint32_t;

struct TokenSpan {
  std::size_t begin = 0;  // byte offsets into the text given to encode
  std::size_t end = 0;
  bool operator==(const TokenSpan&) const = default;
};

struct Encoding {
  std::vector<TokenId> ids;
  std::vector<TokenSpan> offsets;  // one per id
};

class Tokenizer {
 public:
  // Loads a tokenizer.json. Throws fp4serve::Error naming the file and the field at fault.
  static Tokenizer from_file(const std::filesystem::path& tokenizer_json);
  // Loads MODEL_DIR/tokenizer.json.
  static Tokenizer from_model_dir(const std::filesystem::path& model_dir);
  // Parses tokenizer.json text; `source` names it in error messages.
  static Tokenizer from_json(std::string_view json_text, const std::string& source);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of UTF-8 `text` (an Error if it is not valid UTF-8). With parse_special (the
  // Hugging Face default), special tokens written in the text become their ids; without it they
  // are tokenized as ordinary text, which is how untrusted user content must be encoded.
  // Non-special added tokens (<think>, <tool_call>) are always recognized, as in Hugging Face.
  std::vector<TokenId> encode(std::string_view text, bool parse_special = true) const;
  // The same ids with the byte range of the input that each token came from.
  Encoding encode_with_offsets(std::string_view text, bool parse_special = true) const;

  // Text of the ids: byte-level decoded, invalid UTF-8 replaced by U+FFFD as Hugging Face does.
  // skip_special drops special tokens. Throws Error for an id that is not in the vocabulary.
  std::string decode(std::span<const TokenId> ids, bool skip_special = false) const;

  // The vocabulary string of a token ("Ġworld"), or nullopt for an unknown id.
  std::optional<std::string_view> id_to_token(TokenId id) const;
  // Whether id is a token of this vocabulary. A model can sample ids that are not (its lm_head's
  // padding rows: Qwen3 has 151936 for 151669 tokens); text shown for generated ids gives those
  // none (the server's output, `run`, `chat`), as Hugging Face's decode skips ids it does not know.
  bool has_token(std::int64_t id) const;
  std::optional<TokenId> token_to_id(std::string_view token) const;
  // The raw bytes one token decodes to (possibly part of a UTF-8 character). Throws for unknown ids.
  const std::string& token_bytes(TokenId id) const;
  bool is_special(TokenId id) const;
  // Bytes inserted between decoded tokens (empty for ByteLevel).
  std::string_view decode_separator() const;

  // One past the largest id (the model's embedding table may be larger).
  std::size_t id_limit() const;
  // Number of distinct tokens: vocabulary plus added tokens not in it (Hugging Face's
  // get_vocab_size(with_added_tokens=True)).
  std::size_t vocab_size() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp4serve::tokenizer
