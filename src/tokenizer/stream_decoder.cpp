#include "tokenizer/stream_decoder.h"

#include "tokenizer/utf8.h"

namespace fp4serve::tokenizer {

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special)
    : tokenizer_(&tokenizer), skip_special_(skip_special) {}

std::string StreamDecoder::push(TokenId id) {
  const std::string& bytes = tokenizer_->token_bytes(id);  // throws for an unknown id
  if (skip_special_ && tokenizer_->is_special(id)) return {};
  if (started_) pending_.append(tokenizer_->decode_separator());
  started_ = true;
  pending_.append(bytes);
  // Emit every complete character and every definitely-invalid stretch; keep a trailing prefix
  // of a character that the next token may complete.
  std::string out;
  std::size_t i = 0;
  while (i < pending_.size()) {
    const utf8::Scan r = utf8::scan(std::string_view(pending_).substr(i));
    if (r.verdict == utf8::Verdict::Incomplete) break;
    if (r.verdict == utf8::Verdict::Valid) {
      out.append(pending_, i, r.length);
    } else {
      out += "\xEF\xBF\xBD";
    }
    i += r.length;
  }
  pending_.erase(0, i);
  return out;
}

std::string StreamDecoder::finish() {
  std::string out = utf8::repair(pending_);
  pending_.clear();
  return out;
}

void StreamDecoder::reset() {
  pending_.clear();
  started_ = false;
}

}  // namespace fp4serve::tokenizer
