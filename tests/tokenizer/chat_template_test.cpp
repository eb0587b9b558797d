// Chat templates rendered exactly as transformers' apply_chat_template(tokenize=False) renders
// them (tests/data/tokenizer/chat_templates.jsonl, made by tools/make_tokenizer_fixtures.py): the
// real Qwen3 template over many conversations, and small templates covering the Jinja subset.
#include <gtest/gtest.h>

#include <optional>

#include "fixtures.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/jinja_template.h"

namespace fp4serve::tokenizer {
namespace {

using ojson = nlohmann::ordered_json;

std::filesystem::path qwen3_dir() { return fixtures::qwen3_json().parent_path(); }

std::vector<ojson> read_lines() {
  std::ifstream in(fixtures::data_dir() / "chat_templates.jsonl");
  std::vector<ojson> lines;
  std::string raw;
  while (std::getline(in, raw)) lines.push_back(ojson::parse(raw));
  return lines;
}

ChatRequest request_of(const ojson& line) {
  ChatRequest r;
  r.messages = line["messages"];
  r.tools = line["tools"];
  r.add_generation_prompt = line["add_generation_prompt"].get<bool>();
  r.extra = line["kwargs"];
  return r;
}

TEST(ChatTemplate, RendersLikeTransformers) {
  const ChatTemplate qwen3 = ChatTemplate::from_model_dir(qwen3_dir());
  const ojson config = ojson::parse(std::ifstream(qwen3_dir() / "tokenizer_config.json"));
  const auto lines = read_lines();
  ASSERT_GE(lines.size(), 70u);
  int qwen3_cases = 0;
  for (const ojson& line : lines) {
    const std::string label = line["name"].get<std::string>() + " (generation prompt " +
                              (line["add_generation_prompt"].get<bool>() ? "on" : "off") + ", kwargs " +
                              line["kwargs"].dump() + ")";
    const bool is_qwen3 = line.contains("template");
    qwen3_cases += is_qwen3;
    std::optional<ChatTemplate> custom;
    if (!is_qwen3) custom.emplace(line["template_source"].get<std::string>(), config);
    const ChatTemplate& tmpl = is_qwen3 ? qwen3 : *custom;
    if (line.contains("error")) {
      try {
        (void)tmpl.render(request_of(line));
        ADD_FAILURE() << label << ": expected an error";
      } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find(line["error"].get<std::string>()), std::string::npos) << e.what();
      }
      continue;
    }
    std::string rendered;
    try {
      rendered = tmpl.render(request_of(line));
    } catch (const Error& e) {
      ADD_FAILURE() << label << ": " << e.what();
      continue;
    }
    EXPECT_EQ(rendered, line["rendered"].get<std::string>()) << label;
  }
  EXPECT_GE(qwen3_cases, 60);
}

// The rendered prompt tokenizes with special tokens parsed, as the server will do.
TEST(ChatTemplate, RenderedPromptTokenizesToChatMl) {
  const ChatTemplate qwen3 = ChatTemplate::from_model_dir(qwen3_dir());
  ChatRequest r;
  r.messages = ojson::parse(R"([{"role": "user", "content": "Hi"}])");
  r.add_generation_prompt = true;
  r.extra = {{"enable_thinking", false}};
  const std::string prompt = qwen3.render(r);
  EXPECT_EQ(prompt, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  const auto ids = fixtures::qwen3().encode(prompt);
  EXPECT_EQ(ids.front(), 151644u);  // <|im_start|>
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 151645u), 1);  // one <|im_end|>
  EXPECT_EQ(std::count(ids.begin(), ids.end(), 151667u), 1);  // <think>
}

std::string error_of(const std::string& source, const ojson& messages = ojson::array()) {
  try {
    ChatRequest r;
    r.messages = messages;
    (void)ChatTemplate(source).render(r);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ChatTemplate, UnsupportedConstructsNameTheConstructAndLine) {
  EXPECT_NE(error_of("line one\n{% include 'x.jinja' %}").find("line 2: unsupported tag 'include'"), std::string::npos);
  EXPECT_NE(error_of("{{ messages|wordwrap }}").find("line 1: unsupported filter 'wordwrap'"), std::string::npos);
  EXPECT_NE(error_of("\n\n{% if x is prime %}{% endif %}").find("line 3: unsupported test 'prime'"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a'.zfill(3) }}").find("unsupported str method 'zfill'"), std::string::npos);
  EXPECT_NE(error_of("{% if true %}").find("missing {% endif %}"), std::string::npos);
  EXPECT_NE(error_of("{{ 1 + }}").find("line 1: unexpected"), std::string::npos);
  EXPECT_NE(error_of("{{ 'unterminated }}").find("unterminated string"), std::string::npos);
  EXPECT_NE(error_of("{% for x in y recursive %}{% endfor %}").find("recursive"), std::string::npos);
}

TEST(ChatTemplate, RuntimeErrorsNameTheLine) {
  EXPECT_NE(error_of("\n{{ nothing.attr }}").find("line 2: 'nothing' is undefined"), std::string::npos);
  EXPECT_NE(error_of("{{ 'a' + 1 }}").find("unsupported operand types for +: 'str' and 'int'"), std::string::npos);
  EXPECT_NE(error_of("{% set x = 1 %}{% set x.y = 2 %}").find("only namespace() objects"), std::string::npos);
  EXPECT_NE(error_of("{{ raise_exception('bad input') }}").find("bad input"), std::string::npos);
  EXPECT_NE(error_of("{{ messages[0].role + 'x' }}").find("is undefined"), std::string::npos);
}

TEST(ChatTemplate, ModelDirectoryErrors) {
  EXPECT_THROW((void)ChatTemplate::from_model_dir("/nonexistent"), Error);
  // A JSON file without a chat_template.
  EXPECT_THROW((void)ChatTemplate::from_tokenizer_config(fixtures::data_dir() / "synthetic_qwen35" / "tokenizer.json"),
               Error);
}

}  // namespace
}  // namespace fp4serve::tokenizer
