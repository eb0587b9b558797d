// Encoding behaviour beyond the oracle corpus: long words stay fast, the word cache and threads
// change nothing, invalid input is refused, special-token parsing is controllable.
#include <gtest/gtest.h>

#include <chrono>
#include <random>
#include <thread>

#include "fixtures.h"

namespace fp4serve::tokenizer {
namespace {

std::string random_letters(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<char>('a' + rng() % 26);
  return s;
}

double seconds_to_encode(const Tokenizer& tok, const std::string& text) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto ids = tok.encode(text);
  const auto t1 = std::chrono::steady_clock::now();
  EXPECT_EQ(tok.decode(ids), text);
  return std::chrono::duration<double>(t1 - t0).count();
}

// 256 KiB "words" (no spaces, so the regex yields a single piece each): a quadratic merge loop
// would take minutes here; the heap-based one a fraction of a second.
TEST(Encode, LongWordsAreNotQuadratic) {
  const Tokenizer& tok = fixtures::qwen3();
  EXPECT_LT(seconds_to_encode(tok, random_letters(1 << 18, 7)), 10.0);
  EXPECT_LT(seconds_to_encode(tok, std::string(1 << 18, 'a')), 10.0);
  EXPECT_LT(seconds_to_encode(tok, std::string(1 << 18, ' ')), 10.0);
  EXPECT_LT(seconds_to_encode(tok, std::string(1 << 18, '\n')), 10.0);
}

// Doubling a long word should roughly double the time, not quadruple it.
TEST(Encode, LongWordTimeGrowsLinearithmically) {
  const Tokenizer& tok = fixtures::qwen3();
  const std::string small = random_letters(1 << 16, 11), big = random_letters(1 << 18, 11);
  double t_small = 1e9, t_big = 1e9;
  for (int i = 0; i < 3; ++i) {  // best of three, to resist a busy machine
    t_small = std::min(t_small, seconds_to_encode(tok, small));
    t_big = std::min(t_big, seconds_to_encode(tok, big));
  }
  EXPECT_LT(t_big, 12 * t_small + 0.05) << "4x the input took " << t_big / t_small << "x the time";
}

TEST(Encode, CachedAndUncachedResultsAgree) {
  const Tokenizer a = Tokenizer::from_file(fixtures::qwen3_json());
  const std::string text = "the cat sat on the mat, the cat sat on the mat; Über naïve 中文 ☃ 12345";
  const auto first = a.encode(text);   // fills the cache
  const auto second = a.encode(text);  // served from it
  EXPECT_EQ(first, second);
  EXPECT_EQ(first, fixtures::qwen3().encode(text));
}

TEST(Encode, ConcurrentEncodingMatchesSerial) {
  const Tokenizer tok = Tokenizer::from_file(fixtures::qwen3_json());
  const auto lines = fixtures::read_oracle(fixtures::data_dir() / "qwen3_corpus.jsonl");
  std::vector<int> failures(4, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (std::size_t i = static_cast<std::size_t>(t); i < lines.size(); i += 2) {
        if (tok.encode(lines[i].text) != lines[i].ids) ++failures[static_cast<std::size_t>(t)];
      }
    });
  }
  for (auto& th : threads) th.join();
  for (const int f : failures) EXPECT_EQ(f, 0);
}

TEST(Encode, EmptyTextHasNoTokens) {
  EXPECT_TRUE(fixtures::qwen3().encode("").empty());
  EXPECT_TRUE(fixtures::qwen3().encode_with_offsets("").offsets.empty());
}

TEST(Encode, InvalidUtf8IsRefusedWithItsPosition) {
  try {
    (void)fixtures::qwen3().encode("ok\xC3(");
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not valid UTF-8 (byte 2)"), std::string::npos) << e.what();
  }
}

TEST(Encode, SpecialTokensAreParsedOnlyWhenAsked) {
  const Tokenizer& tok = fixtures::qwen3();
  const TokenId im_end = *tok.token_to_id("<|im_end|>");
  const TokenId think = *tok.token_to_id("<think>");
  EXPECT_EQ(im_end, 151645u);
  EXPECT_EQ(think, 151667u);
  EXPECT_TRUE(tok.is_special(im_end));
  EXPECT_FALSE(tok.is_special(think));
  const auto parsed = tok.encode("a<|im_end|><think>");
  const auto plain = tok.encode("a<|im_end|><think>", /*parse_special=*/false);
  EXPECT_EQ(std::count(parsed.begin(), parsed.end(), im_end), 1);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), im_end), 0);
  // <think> is an added token but not special: recognized either way, as in Hugging Face.
  EXPECT_EQ(std::count(plain.begin(), plain.end(), think), 1);
  EXPECT_EQ(tok.decode(plain), "a<|im_end|><think>");
}

TEST(Encode, VocabularyFacts) {
  const Tokenizer& tok = fixtures::qwen3();
  EXPECT_EQ(tok.vocab_size(), 151669u);  // 151643 BPE tokens + 26 added
  EXPECT_EQ(tok.id_limit(), 151669u);
  EXPECT_EQ(tok.id_to_token(9707), "Hello");
  EXPECT_FALSE(tok.id_to_token(200000).has_value());
  EXPECT_THROW((void)tok.decode(std::vector<TokenId>{1, 999999}), Error);
  // has_token: the ids that have text. The lm_head's padding rows (151669..151935) and negative
  // ids do not.
  EXPECT_TRUE(tok.has_token(0));
  EXPECT_TRUE(tok.has_token(9707));
  EXPECT_TRUE(tok.has_token(151668));
  EXPECT_FALSE(tok.has_token(151669));
  EXPECT_FALSE(tok.has_token(151935));
  EXPECT_FALSE(tok.has_token(-1));
  EXPECT_FALSE(tok.has_token(std::int64_t{1} << 40));
}

}  // namespace
}  // namespace fp4serve::tokenizer
