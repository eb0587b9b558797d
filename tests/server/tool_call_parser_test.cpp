#include "server/tool_call_parser.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace fp4serve::server {
namespace {

ToolCallDelta run(ToolCallParser& p, const std::string& text, std::size_t piece) {
  ToolCallDelta all;
  auto add = [&](ToolCallDelta d) {
    all.content += d.content;
    for (ToolCall& c : d.calls) all.calls.push_back(std::move(c));
  };
  for (std::size_t i = 0; i < text.size(); i += piece) add(p.push(text.substr(i, piece)));
  add(p.flush());
  return all;
}

TEST(ToolCallParser, ParsesQwenToolCallBlocksInAnyChunking) {
  const std::string text =
      "I will check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n"
      "</tool_call>\n<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>";
  for (std::size_t n : {1u, 4u, 11u, 1000u}) {
    ToolCallParser p("abc");
    const ToolCallDelta d = run(p, text, n);
    EXPECT_EQ(d.content, "I will check.\n") << n;
    ASSERT_EQ(d.calls.size(), 2u) << n;
    EXPECT_EQ(d.calls[0].name, "get_weather");
    EXPECT_EQ(nlohmann::json::parse(d.calls[0].arguments), nlohmann::json::parse(R"({"city":"Paris","days":2})"));
    EXPECT_EQ(d.calls[0].id, "call_abc0");
    EXPECT_EQ(d.calls[1].name, "get_time");
    EXPECT_EQ(d.calls[1].arguments, "{}");
    EXPECT_EQ(d.calls[1].id, "call_abc1");
    EXPECT_EQ(p.calls(), 2u);
  }
}

TEST(ToolCallParser, StringArgumentsAreKeptAsGiven) {
  ToolCallParser p("x");
  const ToolCallDelta d = run(p, R"(<tool_call>{"name": "f", "arguments": "{\"a\": 1}"}</tool_call>)", 5);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments, R"({"a": 1})");
}

TEST(ToolCallParser, MalformedBlockIsReturnedAsContent) {
  ToolCallParser p("x");
  const std::string text = "<tool_call>{not json}</tool_call> after";
  const ToolCallDelta d = run(p, text, 3);
  EXPECT_TRUE(d.calls.empty());
  EXPECT_EQ(d.content, text);
}

TEST(ToolCallParser, BlockWithoutNameIsContent) {
  ToolCallParser p("x");
  const ToolCallDelta d = run(p, R"(<tool_call>{"arguments": {}}</tool_call>)", 100);
  EXPECT_TRUE(d.calls.empty());
  EXPECT_EQ(d.content, R"(<tool_call>{"arguments": {}}</tool_call>)");
}

TEST(ToolCallParser, UnterminatedCompleteJsonIsStillACall) {
  // Generation stopped at </tool_call>'s token boundary or by a stop token right after the JSON.
  ToolCallParser p("x");
  const ToolCallDelta d = run(p, R"(<tool_call>{"name": "f", "arguments": {"k": [1]}})", 2);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].name, "f");
}

TEST(ToolCallParser, UnterminatedBrokenBlockIsContent) {
  ToolCallParser p("x");
  const ToolCallDelta d = run(p, R"(<tool_call>{"name": "f", "argu)", 4);
  EXPECT_TRUE(d.calls.empty());
  EXPECT_EQ(d.content, R"(<tool_call>{"name": "f", "argu)");
}

TEST(ToolCallParser, PlainTextStreamsWithoutDelay) {
  ToolCallParser p("x");
  EXPECT_EQ(p.push("hello ").content, "hello ");
  EXPECT_EQ(p.push("<tool").content, "");  // could be a tag
  EXPECT_EQ(p.push("box>").content, "<toolbox>");
}

TEST(ToolCallParser, ContentAfterACallIsKept) {
  ToolCallParser p("x");
  const ToolCallDelta d = run(p, "<tool_call>{\"name\": \"f\"}</tool_call>\n\nDone.", 3);
  ASSERT_EQ(d.calls.size(), 1u);
  EXPECT_EQ(d.calls[0].arguments, "{}");
  EXPECT_EQ(d.content, "\n\nDone.");
}

// Found by openai_request_fuzz: blank text that follows real content after a call was held as
// "layout" when it arrived in its own piece, and then dropped at the end of the output.
TEST(ToolCallParser, TrailingBlankAfterContentIsKeptInAnyChunking) {
  const std::string text = "<tool_call>{\"name\": \"f\"}</tool_call>\n tail\t \n";
  for (std::size_t n : {1u, 2u, 5u, 1000u}) {
    ToolCallParser p("x");
    const ToolCallDelta d = run(p, text, n);
    ASSERT_EQ(d.calls.size(), 1u) << n;
    EXPECT_EQ(d.content, "\n tail\t \n") << n;
  }
}

TEST(ToolCallParser, BlankTextOnlyAfterTheLastCallIsDropped) {
  for (std::size_t n : {1u, 3u, 1000u}) {
    ToolCallParser p("x");
    const ToolCallDelta d = run(p, "<tool_call>{\"name\": \"f\"}</tool_call>\n \n", n);
    ASSERT_EQ(d.calls.size(), 1u) << n;
    EXPECT_EQ(d.content, "") << n;
  }
}

}  // namespace
}  // namespace fp4serve::server
