#pragma once
// A parsed Jinja template and its renderer: the subset of Jinja2 that Hugging Face chat templates
// use (if/elif/else, for with loop.* and else, set and namespace(), macros, filters, tests, string
// and dict methods, slices, break/continue), rendered with Jinja2's semantics as transformers
// configures it. Anything else is refused with its name and line.
#include <memory>
#include <string>
#include <string_view>

#include "tokenizer/jinja_ast.h"
#include "tokenizer/jinja_value.h"

namespace fp4serve::tokenizer::jinja {

class Template {
 public:
  // Throws Error "chat template, line N: ..." for syntax errors and unsupported constructs.
  explicit Template(std::string_view source);

  // Renders with `variables` (messages, tools, add_generation_prompt, ...) on top of the globals.
  // Throws Error naming the line for runtime errors (undefined values, bad operands,
  // raise_exception).
  std::string render(const Dict& variables) const;

 private:
  std::shared_ptr<const Body> body_;
};

}  // namespace fp4serve::tokenizer::jinja
