#pragma once
// The filters, tests, methods and global functions of the chat-template interpreter, with the
// behaviour of Jinja2 and of the Python objects it wraps (str.split, dict.get...).
#include <string>

#include "tokenizer/jinja_value.h"

namespace fp4serve::tokenizer::jinja {

// Each throws Error "chat template, line N: ..." for unknown names and bad arguments.
Value apply_filter(const std::string& name, const Value& value, Args& args, int line);
bool apply_test(const std::string& name, const Value& value, Args& args, int line);
// obj.name as Jinja resolves it: a method bound to `obj`, a dict member, or Undefined.
Value get_attribute(const Value& obj, const std::string& name, int line);
// obj[key]: list/str index, dict key; Undefined when absent (as Jinja's getitem).
Value get_item(const Value& obj, const Value& key, int line);
// obj[start:stop:step] with Python's slice rules (strings by character).
Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step, int line);

// The globals transformers provides: range, namespace, dict, raise_exception, strftime_now.
void add_globals(Dict& globals);

// Python's `a in b`.
bool contains(const Value& container, const Value& item, int line);
// Iteration as Jinja does it: list items, dict keys, string characters; Undefined is empty.
List iterate(const Value& v, int line);

[[noreturn]] void template_error(int line, const std::string& what);

}  // namespace fp4serve::tokenizer::jinja
