#include "server/reasoning_parser.h"

#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

namespace fp4serve::server {
namespace {

// {reasoning, content}: all a stream turned into, as a pair so a mismatch prints both sides.
using Split = std::pair<std::string, std::string>;

// Streams `pieces` through a fresh parser, then flushes it.
Split split(const std::vector<std::string>& pieces, bool starts_in_reasoning = false) {
  ReasoningParser p(starts_in_reasoning);
  Split all;
  auto add = [&](const ReasoningDelta& d) {
    all.first += d.reasoning;
    all.second += d.content;
  };
  for (const std::string& s : pieces) add(p.push(s));
  add(p.flush());
  return all;
}

// Splits `text` into pieces of `n` bytes, as a stream of tokens would.
std::vector<std::string> chunks(const std::string& text, std::size_t n) {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < text.size(); i += n) out.push_back(text.substr(i, n));
  return out;
}

TEST(ReasoningParser, SplitsThinkBlockFromAnswer) {
  const std::string text = "<think>\nLet me add 2 and 2.\n</think>\n\nThe answer is 4.";
  for (std::size_t n : {1u, 2u, 3u, 7u, 100u}) {
    EXPECT_EQ(split(chunks(text, n)), Split("\nLet me add 2 and 2.\n", "The answer is 4.")) << n;
  }
}

TEST(ReasoningParser, NoThinkBlockIsAllContent) {
  EXPECT_EQ(split({"Hel", "lo <think> is not at the start"}), Split("", "Hello <think> is not at the start"));
}

TEST(ReasoningParser, TextThatLooksLikeTheTagStartIsReleased) {
  ReasoningParser p;
  EXPECT_EQ(p.push("<thi").content, "");  // could still be <think>
  EXPECT_EQ(p.push("s is html").content, "<this is html");
}

TEST(ReasoningParser, PromptThatOpenedThinkingStartsInReasoning) {
  EXPECT_TRUE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  EXPECT_FALSE(prompt_opens_reasoning("<|im_start|>assistant\n"));
  EXPECT_EQ(split(chunks("step one</think>\n\nDone.", 3), /*starts_in_reasoning=*/true), Split("step one", "Done."));
}

TEST(ReasoningParser, UnclosedThinkingIsAllReasoning) {
  EXPECT_EQ(split({"<think>", "still thinking </thi"}), Split("still thinking </thi", ""));
}

TEST(ReasoningParser, PartialCloseTagIsNotStreamedAsReasoning) {
  ReasoningParser p(true);
  EXPECT_EQ(p.push("abc</th").reasoning, "abc");
  const ReasoningDelta d = p.push("ink>x");
  EXPECT_EQ(d.reasoning, "");
  EXPECT_EQ(d.content, "x");
}

}  // namespace
}  // namespace fp4serve::server
