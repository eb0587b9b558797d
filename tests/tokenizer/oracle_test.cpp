// Exactness against Hugging Face tokenizers: every fixture line's ids (and offsets, and ids with
// special tokens left unparsed) must be identical, and decode(encode(x)) must give NFC(x).
#include <gtest/gtest.h>

#include "fixtures.h"
#include "tokenizer/stream_decoder.h"

namespace fp4serve::tokenizer {
namespace {

using fixtures::describe;
using fixtures::OracleLine;

// Checks every line and reports the first few failures in full, then the totals.
void check_oracle(const Tokenizer& tok, const std::vector<OracleLine>& lines) {
  ASSERT_FALSE(lines.empty());
  int failures = 0;
  std::size_t with_offsets = 0, with_plain = 0;
  for (const OracleLine& line : lines) {
    const Encoding enc = tok.encode_with_offsets(line.text);
    EXPECT_EQ(tok.encode(line.text), enc.ids) << "encode and encode_with_offsets disagree";
    std::string problems;
    if (enc.ids != line.ids) {
      problems += "\n ids " + ::testing::PrintToString(enc.ids) + "\n HF  " + ::testing::PrintToString(line.ids);
    }
    if (line.offsets) {
      ++with_offsets;
      if (enc.offsets != *line.offsets) {
        for (std::size_t i = 0; i < std::min(enc.offsets.size(), line.offsets->size()); ++i) {
          const TokenSpan a = enc.offsets[i], b = (*line.offsets)[i];
          if (a == b) continue;
          problems += "\n offsets differ first at token " + std::to_string(i) + ": [" + std::to_string(a.begin) + "," +
                      std::to_string(a.end) + ") vs HF [" + std::to_string(b.begin) + "," + std::to_string(b.end) + ")";
          break;
        }
      }
    }
    const std::vector<TokenId>& plain_expected = line.ids_plain ? *line.ids_plain : line.ids;
    with_plain += line.ids_plain ? 1 : 0;
    const auto plain = tok.encode(line.text, /*parse_special=*/false);
    if (plain != plain_expected) {
      problems += "\n unparsed-special ids " + ::testing::PrintToString(plain) + "\n HF " +
                  ::testing::PrintToString(plain_expected);
    }
    const std::string decoded = tok.decode(line.ids);
    if (decoded != line.expected_decode) problems += "\n decode gives " + fixtures::describe(decoded);
    if (!problems.empty() && ++failures <= 8) ADD_FAILURE() << "mismatch for " << describe(line.text) << problems;
  }
  EXPECT_EQ(failures, 0) << "of " << lines.size() << " lines";
  ::testing::Test::RecordProperty("lines", static_cast<int>(lines.size()));
  ::testing::Test::RecordProperty("with_offsets", static_cast<int>(with_offsets));
  ::testing::Test::RecordProperty("with_plain", static_cast<int>(with_plain));
}

TEST(Oracle, Qwen3CorpusIsIdenticalToHuggingFace) {
  const auto lines = fixtures::read_oracle(fixtures::data_dir() / "qwen3_corpus.jsonl");
  EXPECT_GT(lines.size(), 1000u);
  check_oracle(fixtures::qwen3(), lines);
}

TEST(Oracle, SyntheticQwen35IsIdenticalToHuggingFace) {
  const auto dir = fixtures::data_dir() / "synthetic_qwen35";
  check_oracle(Tokenizer::from_file(dir / "tokenizer.json"), fixtures::read_oracle(dir / "oracle.jsonl"));
}

TEST(Oracle, SyntheticFeaturesIsIdenticalToHuggingFace) {
  const auto dir = fixtures::data_dir() / "synthetic_features";
  check_oracle(Tokenizer::from_file(dir / "tokenizer.json"), fixtures::read_oracle(dir / "oracle.jsonl"));
}

// The legacy "a b" string form of merges must behave exactly like the ["a", "b"] pair form.
TEST(Oracle, StringFormMergesMatchPairForm) {
  const auto dir = fixtures::data_dir() / "synthetic_qwen35";
  std::ifstream in(dir / "tokenizer.json");
  nlohmann::json doc = nlohmann::json::parse(in);
  auto& merges = doc["model"]["merges"];
  ASSERT_TRUE(merges.at(0).is_array()) << "fixture should use the pair form";
  for (auto& m : merges) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  const Tokenizer tok = Tokenizer::from_json(doc.dump(), "string-merges.json");
  check_oracle(tok, fixtures::read_oracle(dir / "oracle.jsonl"));
}

TEST(Oracle, StreamingDecodeOfCorpusEqualsFullDecode) {
  const Tokenizer& tok = fixtures::qwen3();
  const auto lines = fixtures::read_oracle(fixtures::data_dir() / "qwen3_corpus.jsonl");
  StreamDecoder stream(tok);
  for (const OracleLine& line : lines) {
    stream.reset();
    std::string streamed;
    for (const TokenId id : line.ids) streamed += stream.push(id);
    streamed += stream.finish();
    ASSERT_EQ(streamed, line.expected_decode) << describe(line.text);
  }
}

}  // namespace
}  // namespace fp4serve::tokenizer
