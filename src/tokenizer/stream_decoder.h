#pragma once
// Streaming detokenizer: feed token ids as the model produces them and get text as soon as it is
// certain. A UTF-8 character split across tokens is held back until complete; bytes that can no
// longer become valid UTF-8 are emitted as U+FFFD right away; finish() flushes what is left. The
// concatenated output always equals Tokenizer::decode of all the ids.
#include <string>

#include "tokenizer/tokenizer.h"

namespace fp4serve::tokenizer {

class StreamDecoder {
 public:
  // `tokenizer` must outlive the decoder.
  explicit StreamDecoder(const Tokenizer& tokenizer, bool skip_special = false);

  // Text that became final with this token (often empty inside a multi-byte character).
  std::string push(TokenId id);
  // Text still pending at the end of the stream (incomplete characters become U+FFFD).
  std::string finish();
  // Starts a new stream.
  void reset();

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_;
  bool started_ = false;
  std::string pending_;  // bytes of an incomplete UTF-8 sequence
};

}  // namespace fp4serve::tokenizer
