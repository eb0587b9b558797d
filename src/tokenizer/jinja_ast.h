#pragma once
// Syntax tree of the Jinja subset that chat templates use.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tokenizer/jinja_value.h"

namespace fp4serve::tokenizer::jinja {

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,  // value
    Name,     // name
    Attr,     // operands[0].name
    Item,     // operands[0][operands[1]]
    Slice,    // operands[0][a:b:c], absent parts are null
    Call,     // operands[0](operands[1..], keyword...)
    Filter,   // operands[0] | name(operands[1..], keyword...)
    Test,     // operands[0] is [not] name(operands[1..])
    Unary,    // name is "not", "-" or "+"
    Binary,   // name is the operator: and or + - * / // % ** ~
    Compare,  // operands[0] ops[0] operands[1] ops[1] operands[2] ...
    Cond,     // operands[0] if operands[1] else operands[2] (else may be null)
    ListLiteral,
    TupleLiteral,
    DictLiteral,  // keys and values alternate
  };
  Kind kind;
  int line;
  Value value;
  std::string name;
  std::vector<ExprPtr> operands;
  std::vector<std::pair<std::string, ExprPtr>> keyword;
  std::vector<std::string> ops;
  bool negated = false;
};

struct Node;
using NodePtr = std::unique_ptr<Node>;
using Body = std::vector<NodePtr>;

struct Node {
  enum class Kind { Text, Print, If, For, Set, SetBlock, Macro, Break, Continue, Passthrough };
  Kind kind;
  int line;
  std::string text;  // Text
  ExprPtr expr;      // Print, Set value, For iterable
  // If: one condition per branch (conditions.size() == branches.size()), plus else_body.
  std::vector<ExprPtr> conditions;
  std::vector<Body> branches;
  Body body;       // For, SetBlock, Macro, Passthrough ({% generation %})
  Body else_body;  // If, For
  // For: loop variables and optional "if" filter. Set: target names; a dotted target "ns.attr" is
  // stored as {"ns", "attr"} with `attribute` set. Macro: its name in targets[0].
  std::vector<std::string> targets;
  bool attribute = false;
  ExprPtr filter;
  // Macro parameters with optional defaults.
  std::vector<std::string> params;
  std::vector<ExprPtr> defaults;
};

}  // namespace fp4serve::tokenizer::jinja
