// The streaming detokenizer: output is emitted as soon as it is final, never splits a character,
// and adds up to the full decode, including for id sequences that are not valid UTF-8.
#include <gtest/gtest.h>

#include <random>

#include "fixtures.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/utf8.h"

namespace fp4serve::tokenizer {
namespace {

const std::string kReplacement = "\xEF\xBF\xBD";

// After every push: the output so far is valid UTF-8, it is a prefix of the full decode of the ids
// pushed so far, and it misses at most the one U+FFFD that an unfinished character decodes to.
void check_stream(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  StreamDecoder stream(tok);
  std::string emitted;
  for (std::size_t k = 0; k < ids.size(); ++k) {
    const std::string chunk = stream.push(ids[k]);
    ASSERT_EQ(utf8::find_invalid(chunk), std::string::npos) << "chunk splits a character";
    emitted += chunk;
    const std::string full = tok.decode(std::span(ids).first(k + 1));
    ASSERT_EQ(full.compare(0, emitted.size(), emitted), 0) << "output is not a prefix of decode()";
    const std::string rest = full.substr(emitted.size());
    ASSERT_TRUE(rest.empty() || rest == kReplacement) << "held back too much after " << k + 1 << " ids";
  }
  emitted += stream.finish();
  EXPECT_EQ(emitted, tok.decode(ids));
}

TEST(StreamDecoder, EmojiArrivesWholeAsSoonAsComplete) {
  const Tokenizer& tok = fixtures::qwen3();
  const std::string text = "Hi 👨‍👩‍👧‍👦 and 中文 ok";
  const auto ids = tok.encode(text);
  check_stream(tok, ids);
  StreamDecoder stream(tok);
  std::string out;
  for (const TokenId id : ids) out += stream.push(id);
  EXPECT_EQ(out, text);  // nothing left for finish(): the text ends on a complete character
  EXPECT_EQ(stream.finish(), "");
}

TEST(StreamDecoder, RandomByteTokensMatchFullDecode) {
  // Single-byte tokens in random order produce every kind of broken and valid UTF-8.
  const Tokenizer& tok = fixtures::qwen3();
  std::vector<TokenId> byte_tokens;
  for (int b = 0; b < 256; ++b) byte_tokens.push_back(*tok.token_to_id(byte_level_utf8(b)));
  std::mt19937 rng(1234);
  for (int round = 0; round < 300; ++round) {
    std::vector<TokenId> ids(rng() % 40 + 1);
    for (auto& id : ids) {
      // Bias towards lead and continuation bytes so multi-byte sequences actually form.
      const int pick = static_cast<int>(rng() % 4);
      const int b = pick == 0 ? static_cast<int>(rng() % 128) : pick == 1 ? 0x80 + static_cast<int>(rng() % 64)
                                                                         : 0xC0 + static_cast<int>(rng() % 64);
      id = byte_tokens[static_cast<std::size_t>(b)];
    }
    check_stream(tok, ids);
  }
}

TEST(StreamDecoder, RandomVocabularyIdsMatchFullDecode) {
  const Tokenizer& tok = fixtures::qwen3();
  std::mt19937 rng(99);
  for (int round = 0; round < 200; ++round) {
    std::vector<TokenId> ids(rng() % 30 + 1);
    for (auto& id : ids) id = static_cast<TokenId>(rng() % tok.id_limit());
    check_stream(tok, ids);
  }
}

TEST(StreamDecoder, UnfinishedCharacterIsFlushedAsReplacement) {
  const Tokenizer& tok = fixtures::qwen3();
  // The first two bytes of "中" (E4 B8 AD) as byte tokens.
  const TokenId e4 = *tok.token_to_id(byte_level_utf8(0xE4)), b8 = *tok.token_to_id(byte_level_utf8(0xB8));
  StreamDecoder stream(tok);
  EXPECT_EQ(stream.push(*tok.token_to_id("a")), "a");
  EXPECT_EQ(stream.push(e4), "");
  EXPECT_EQ(stream.push(b8), "");
  EXPECT_EQ(stream.finish(), kReplacement);
}

TEST(StreamDecoder, SkipSpecialDropsSpecialTokensOnly) {
  const Tokenizer& tok = fixtures::qwen3();
  const auto ids = tok.encode("<|im_start|>assistant\n<think>\nok\n</think>\n\nDone.<|im_end|>");
  StreamDecoder stream(tok, /*skip_special=*/true);
  std::string out;
  for (const TokenId id : ids) out += stream.push(id);
  out += stream.finish();
  EXPECT_EQ(out, "assistant\n<think>\nok\n</think>\n\nDone.");  // <think> is not special in Qwen3
  EXPECT_EQ(out, tok.decode(ids, /*skip_special=*/true));
}

TEST(StreamDecoder, UnknownIdIsAnError) {
  const Tokenizer& tok = fixtures::qwen3();
  StreamDecoder stream(tok);
  EXPECT_THROW(stream.push(static_cast<TokenId>(tok.id_limit())), Error);
}

}  // namespace
}  // namespace fp4serve::tokenizer
