#pragma once
// Splits a Jinja template into text and tag tokens the way Jinja2 does with the settings that
// transformers uses for chat templates: trim_blocks, lstrip_blocks, "-" and "+" whitespace
// control, comments, {% raw %}, newlines normalized to "\n", one trailing newline dropped.
#include <string>
#include <string_view>
#include <vector>

namespace fp4serve::tokenizer::jinja {

struct Token {
  enum class Type { Text, PrintBegin, PrintEnd, BlockBegin, BlockEnd, Name, String, Integer, Float, Operator, End };
  Type type;
  std::string text;  // Text: the literal text; String: the unescaped value; others: as written
  int line;
};

// Throws Error "chat template, line N: ..." for unterminated tags, strings or bad characters.
std::vector<Token> lex(std::string_view source);

}  // namespace fp4serve::tokenizer::jinja
