#pragma once
// Parses lexed Jinja tokens into a tree. A construct outside the supported subset fails with an
// Error naming it and its line: "chat template, line 7: unsupported tag 'include'".
#include <string_view>

#include "tokenizer/jinja_ast.h"

namespace fp4serve::tokenizer::jinja {

Body parse(std::string_view source);

}  // namespace fp4serve::tokenizer::jinja
