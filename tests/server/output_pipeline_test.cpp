// What the server shows of generated ids the tokenizer does not define: the lm_head's padding rows
// (Qwen3: 151936 rows for 151669 tokens), which a model can sample. They have no text, as in
// Hugging Face's decode, and generation goes on around them.
#include "server/output_pipeline.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "tokenizer/tokenizer.h"

namespace fp4serve::server {
namespace {

const tokenizer::Tokenizer& qwen3() {
  static const tokenizer::Tokenizer tok = tokenizer::Tokenizer::from_file(
      std::filesystem::path(FP4SERVE_SOURCE_DIR) / "assets" / "qwen3-tokenizer" / "tokenizer.json");
  return tok;
}

TEST(OutputPipeline, IdsPastTheVocabularyHaveNoText) {
  const tokenizer::Tokenizer& tok = qwen3();
  OutputPipeline out(tok, OutputOptions{});
  std::string text;
  for (const std::int32_t id : {9707, 151800, 151935, 9707}) text += out.push(id).content;  // 9707: "Hello"
  text += out.finish().content;
  EXPECT_EQ(text, "HelloHello");
}

TEST(OutputPipeline, LogprobTextOfAnIdPastTheVocabularyIsEmpty) {
  const tokenizer::Tokenizer& tok = qwen3();
  EXPECT_EQ(token_text(tok, 9707), "Hello");
  EXPECT_EQ(token_text(tok, 151669), "");
  EXPECT_EQ(token_text(tok, 151935), "");
  EXPECT_EQ(token_text(tok, -1), "");
}

}  // namespace
}  // namespace fp4serve::server
