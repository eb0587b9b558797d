#include "tokenizer/jinja_parser.h"

#include <set>

#include "tokenizer/jinja_lexer.h"
#include "util/error.h"

namespace fp4serve::tokenizer::jinja {
namespace {

using T = Token::Type;

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse_template() {
    std::string end_tag;
    Body body = parse_body({}, end_tag);
    return body;
  }

 private:
  [[noreturn]] void error(const std::string& what) const { fail("chat template, line ", peek().line, ": ", what); }

  const Token& peek(std::size_t ahead = 0) const { return t_[std::min(i_ + ahead, t_.size() - 1)]; }
  const Token& next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }
  bool is_op(const char* op, std::size_t ahead = 0) const {
    return peek(ahead).type == T::Operator && peek(ahead).text == op;
  }
  bool is_name(const char* name, std::size_t ahead = 0) const {
    return peek(ahead).type == T::Name && peek(ahead).text == name;
  }
  void expect_op(const char* op) {
    if (!is_op(op)) error(std::string("expected '") + op + "'" + found());
    next();
  }
  void expect(T type, const char* what) {
    if (peek().type != type) error(std::string("expected ") + what + found());
    next();
  }
  std::string found() const {
    const Token& t = peek();
    if (t.type == T::End) return " at the end of the template";
    if (t.type == T::BlockEnd) return " before %}";
    if (t.type == T::PrintEnd) return " before }}";
    return ", found '" + t.text + "'";
  }
  std::string expect_name() {
    if (peek().type != T::Name) error("expected a name" + found());
    return next().text;
  }

  // Statements until one of `ends` ({% endif %}, {% else %}...); the tag found goes to end_tag.
  Body parse_body(const std::set<std::string>& ends, std::string& end_tag) {
    // The tag that closes the construct, for "missing {% endif %}" messages.
    std::string closer;
    for (const auto& e : ends)
      if (e.rfind("end", 0) == 0) closer = e;
    Body body;
    while (true) {
      const Token& tok = peek();
      if (tok.type == T::End) {
        if (!ends.empty()) error("missing {% " + closer + " %}");
        return body;
      }
      if (tok.type == T::Text) {
        auto n = node(Node::Kind::Text);
        n->text = next().text;
        body.push_back(std::move(n));
      } else if (tok.type == T::PrintBegin) {
        next();
        auto n = node(Node::Kind::Print);
        n->expr = parse_expression();
        expect(T::PrintEnd, "}}");
        body.push_back(std::move(n));
      } else if (tok.type == T::BlockBegin) {
        if (peek(1).type == T::Name && ends.count(peek(1).text)) {
          next();
          end_tag = next().text;
          return body;
        }
        next();
        body.push_back(parse_statement());
      } else {
        error("unexpected token '" + tok.text + "'");
      }
    }
  }

  NodePtr node(Node::Kind kind) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->line = peek().line;
    return n;
  }

  NodePtr parse_statement() {
    const int line = peek().line;
    const std::string tag = expect_name();
    NodePtr n;
    if (tag == "if") {
      n = parse_if();
    } else if (tag == "for") {
      n = parse_for();
    } else if (tag == "set") {
      n = parse_set();
    } else if (tag == "macro") {
      n = parse_macro();
    } else if (tag == "break" || tag == "continue") {
      n = node(tag == "break" ? Node::Kind::Break : Node::Kind::Continue);
      expect(T::BlockEnd, "%}");
    } else if (tag == "generation") {
      // transformers' extension marking assistant text; it renders its body unchanged.
      n = node(Node::Kind::Passthrough);
      expect(T::BlockEnd, "%}");
      std::string end;
      n->body = parse_body({"endgeneration"}, end);
      expect(T::BlockEnd, "%}");
    } else {
      fail("chat template, line ", line, ": unsupported tag '", tag, "'");
    }
    n->line = line;
    return n;
  }

  NodePtr parse_if() {
    auto n = node(Node::Kind::If);
    n->conditions.push_back(parse_expression());
    expect(T::BlockEnd, "%}");
    while (true) {
      std::string end;
      Body body = parse_body({"elif", "else", "endif"}, end);
      n->branches.push_back(std::move(body));
      if (end == "elif") {
        n->conditions.push_back(parse_expression());
        expect(T::BlockEnd, "%}");
      } else if (end == "else") {
        expect(T::BlockEnd, "%}");
        std::string endif;
        n->else_body = parse_body({"endif"}, endif);
        expect(T::BlockEnd, "%}");
        return n;
      } else {
        expect(T::BlockEnd, "%}");
        return n;
      }
    }
  }

  NodePtr parse_for() {
    auto n = node(Node::Kind::For);
    n->targets.push_back(expect_name());
    while (is_op(",")) {
      next();
      n->targets.push_back(expect_name());
    }
    if (!is_name("in")) error("expected 'in'" + found());
    next();
    n->expr = parse_or_expr();  // no bare "if": it filters the loop here
    if (is_name("if")) {
      next();
      n->filter = parse_or_expr();
    }
    if (is_name("recursive")) error("unsupported: recursive loops");
    expect(T::BlockEnd, "%}");
    std::string end;
    n->body = parse_body({"else", "endfor"}, end);
    expect(T::BlockEnd, "%}");
    if (end == "else") {
      std::string endfor;
      n->else_body = parse_body({"endfor"}, endfor);
      expect(T::BlockEnd, "%}");
    }
    return n;
  }

  NodePtr parse_set() {
    auto n = node(Node::Kind::Set);
    n->targets.push_back(expect_name());
    if (is_op(".")) {
      next();
      n->targets.push_back(expect_name());
      n->attribute = true;
    } else {
      while (is_op(",")) {
        next();
        n->targets.push_back(expect_name());
      }
    }
    if (peek().type == T::BlockEnd && !n->attribute && n->targets.size() == 1) {
      // {% set name %}...{% endset %}
      next();
      n->kind = Node::Kind::SetBlock;
      std::string end;
      n->body = parse_body({"endset"}, end);
      expect(T::BlockEnd, "%}");
      return n;
    }
    expect_op("=");
    n->expr = parse_tuple_or_expression();
    expect(T::BlockEnd, "%}");
    return n;
  }

  NodePtr parse_macro() {
    auto n = node(Node::Kind::Macro);
    n->targets.push_back(expect_name());
    expect_op("(");
    while (!is_op(")")) {
      n->params.push_back(expect_name());
      if (is_op("=")) {
        next();
        n->defaults.push_back(parse_expression());
      } else {
        n->defaults.push_back(nullptr);
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
    expect(T::BlockEnd, "%}");
    std::string end;
    n->body = parse_body({"endmacro"}, end);
    expect(T::BlockEnd, "%}");
    return n;
  }

  // ---- expressions, with Jinja2's precedence ----

  ExprPtr make(Expr::Kind kind, int line) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->line = line;
    return e;
  }

  // "a, b" without brackets is a tuple (in {% set %} and {{ }}).
  ExprPtr parse_tuple_or_expression() {
    const int line = peek().line;
    ExprPtr first = parse_expression();
    if (!is_op(",")) return first;
    auto t = make(Expr::Kind::TupleLiteral, line);
    t->operands.push_back(std::move(first));
    while (is_op(",")) {
      next();
      t->operands.push_back(parse_expression());
    }
    return t;
  }

  ExprPtr parse_expression() {
    const int line = peek().line;
    ExprPtr value = parse_or_expr();
    if (!is_name("if")) return value;
    next();
    auto c = make(Expr::Kind::Cond, line);
    c->operands.push_back(std::move(value));
    c->operands.push_back(parse_or_expr());
    if (is_name("else")) {
      next();
      c->operands.push_back(parse_expression());
    } else {
      c->operands.push_back(nullptr);
    }
    return c;
  }

  ExprPtr binary(const char* op, ExprPtr l, ExprPtr r, int line) {
    auto b = make(Expr::Kind::Binary, line);
    b->name = op;
    b->operands.push_back(std::move(l));
    b->operands.push_back(std::move(r));
    return b;
  }

  ExprPtr parse_or_expr() {
    ExprPtr l = parse_and();
    while (is_name("or")) {
      const int line = next().line;
      l = binary("or", std::move(l), parse_and(), line);
    }
    return l;
  }
  ExprPtr parse_and() {
    ExprPtr l = parse_not();
    while (is_name("and")) {
      const int line = next().line;
      l = binary("and", std::move(l), parse_not(), line);
    }
    return l;
  }
  ExprPtr parse_not() {
    if (is_name("not")) {
      const int line = next().line;
      auto u = make(Expr::Kind::Unary, line);
      u->name = "not";
      u->operands.push_back(parse_not());
      return u;
    }
    return parse_compare();
  }
  ExprPtr parse_compare() {
    const int line = peek().line;
    ExprPtr first = parse_math1();
    ExprPtr chain;
    while (true) {
      std::string op;
      if (peek().type == T::Operator &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" || peek().text == ">" ||
           peek().text == "<=" || peek().text == ">=")) {
        op = next().text;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else {
        break;
      }
      if (!chain) {
        chain = make(Expr::Kind::Compare, line);
        chain->operands.push_back(std::move(first));
      }
      chain->ops.push_back(op);
      chain->operands.push_back(parse_math1());
    }
    return chain ? std::move(chain) : std::move(first);
  }
  ExprPtr parse_math1() {
    ExprPtr l = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      l = binary(op.text == "+" ? "+" : "-", std::move(l), parse_concat(), op.line);
    }
    return l;
  }
  ExprPtr parse_concat() {
    ExprPtr l = parse_math2();
    while (is_op("~")) {
      const int line = next().line;
      l = binary("~", std::move(l), parse_math2(), line);
    }
    return l;
  }
  ExprPtr parse_math2() {
    ExprPtr l = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token op = next();
      l = binary(op.text == "*" ? "*" : op.text == "/" ? "/" : op.text == "//" ? "//" : "%", std::move(l), parse_pow(),
                 op.line);
    }
    return l;
  }
  ExprPtr parse_pow() {
    ExprPtr l = parse_unary(true);
    while (is_op("**")) {
      const int line = next().line;
      l = binary("**", std::move(l), parse_unary(true), line);
    }
    return l;
  }
  ExprPtr parse_unary(bool with_filter) {
    ExprPtr e;
    if (is_op("-") || is_op("+")) {
      const Token op = next();
      e = make(Expr::Kind::Unary, op.line);
      e->name = op.text == "-" ? "-" : "+";
      e->operands.push_back(parse_unary(false));
    } else {
      e = parse_postfix(parse_primary());
    }
    return with_filter ? parse_filters(std::move(e)) : std::move(e);
  }

  ExprPtr parse_primary() {
    const Token tok = next();
    switch (tok.type) {
      case T::String: {
        auto e = make(Expr::Kind::Literal, tok.line);
        std::string s = tok.text;
        while (peek().type == T::String) s += next().text;  // adjacent literals concatenate
        e->value = s;
        return e;
      }
      case T::Integer: {
        auto e = make(Expr::Kind::Literal, tok.line);
        try {
          e->value = static_cast<std::int64_t>(std::stoll(tok.text));
        } catch (const std::exception&) {
          e->value = std::stod(tok.text);
        }
        return e;
      }
      case T::Float: {
        auto e = make(Expr::Kind::Literal, tok.line);
        e->value = std::stod(tok.text);
        return e;
      }
      case T::Name: {
        auto e = make(Expr::Kind::Literal, tok.line);
        if (tok.text == "true" || tok.text == "True") {
          e->value = true;
        } else if (tok.text == "false" || tok.text == "False") {
          e->value = false;
        } else if (tok.text == "none" || tok.text == "None") {
          e->value = None{};
        } else {
          e->kind = Expr::Kind::Name;
          e->name = tok.text;
        }
        return e;
      }
      case T::Operator:
        if (tok.text == "(") {
          if (is_op(")")) {
            next();
            return make(Expr::Kind::TupleLiteral, tok.line);
          }
          ExprPtr inner = parse_expression();
          if (is_op(",")) {
            auto t = make(Expr::Kind::TupleLiteral, tok.line);
            t->operands.push_back(std::move(inner));
            while (is_op(",")) {
              next();
              if (is_op(")")) break;
              t->operands.push_back(parse_expression());
            }
            inner = std::move(t);
          }
          expect_op(")");
          return inner;
        }
        if (tok.text == "[") {
          auto l = make(Expr::Kind::ListLiteral, tok.line);
          while (!is_op("]")) {
            l->operands.push_back(parse_expression());
            if (!is_op(",")) break;
            next();
          }
          expect_op("]");
          return l;
        }
        if (tok.text == "{") {
          auto d = make(Expr::Kind::DictLiteral, tok.line);
          while (!is_op("}")) {
            d->operands.push_back(parse_expression());
            expect_op(":");
            d->operands.push_back(parse_expression());
            if (!is_op(",")) break;
            next();
          }
          expect_op("}");
          return d;
        }
        break;
      default:
        break;
    }
    --i_;
    error("unexpected " + std::string(tok.type == T::Operator ? "'" + tok.text + "'" : "token") + " in expression");
  }

  // Call arguments after "(": positional then name=value.
  void parse_call_args(Expr& call) {
    while (!is_op(")")) {
      if (peek().type == T::Name && is_op("=", 1)) {
        std::string key = next().text;
        next();
        call.keyword.emplace_back(std::move(key), parse_expression());
      } else {
        if (!call.keyword.empty()) error("positional argument after keyword argument");
        call.operands.push_back(parse_expression());
      }
      if (!is_op(",")) break;
      next();
    }
    expect_op(")");
  }

  ExprPtr parse_postfix(ExprPtr e) {
    while (true) {
      if (is_op(".")) {
        const int line = next().line;
        auto a = make(Expr::Kind::Attr, line);
        if (peek().type == T::Integer) {
          a->kind = Expr::Kind::Item;  // x.0 is x[0]
          a->operands.push_back(std::move(e));
          auto idx = make(Expr::Kind::Literal, line);
          idx->value = static_cast<std::int64_t>(std::stoll(next().text));
          a->operands.push_back(std::move(idx));
        } else {
          a->name = expect_name();
          a->operands.push_back(std::move(e));
        }
        e = std::move(a);
      } else if (is_op("[")) {
        const int line = next().line;
        ExprPtr parts[3];
        bool slice = false;
        for (int k = 0; k < 3; ++k) {
          if (!is_op(":") && !is_op("]")) parts[k] = parse_expression();
          if (is_op(":") && k < 2) {
            next();
            slice = true;
          } else {
            break;
          }
        }
        expect_op("]");
        auto s = make(slice ? Expr::Kind::Slice : Expr::Kind::Item, line);
        s->operands.push_back(std::move(e));
        if (slice) {
          for (auto& p : parts) s->operands.push_back(std::move(p));
        } else {
          if (!parts[0]) error("empty subscript");
          s->operands.push_back(std::move(parts[0]));
        }
        e = std::move(s);
      } else if (is_op("(")) {
        const int line = next().line;
        auto c = make(Expr::Kind::Call, line);
        c->operands.push_back(std::move(e));
        parse_call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }

  ExprPtr parse_filters(ExprPtr e) {
    while (true) {
      if (is_op("|")) {
        const int line = next().line;
        auto f = make(Expr::Kind::Filter, line);
        f->name = expect_name();
        f->operands.push_back(std::move(e));
        if (is_op("(")) {
          next();
          parse_call_args(*f);
        }
        e = parse_postfix(std::move(f));
      } else if (is_name("is")) {
        const int line = next().line;
        auto t = make(Expr::Kind::Test, line);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        // Test names include keywords: "is none", "is true", "is false".
        t->name = expect_name();
        t->operands.push_back(std::move(e));
        if (is_op("(")) {
          next();
          parse_call_args(*t);
        } else if (peek().type == T::String || peek().type == T::Integer || peek().type == T::Float ||
                   (peek().type == T::Name && !is_name("and") && !is_name("or") && !is_name("if") &&
                    !is_name("else") && !is_name("is") && !is_name("in") && !is_name("not"))) {
          t->operands.push_back(parse_primary());  // "x is divisibleby 3", "x is sameas y"
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  std::vector<Token> t_;
  std::size_t i_ = 0;
};

}  // namespace

Body parse(std::string_view source) { return Parser(lex(source)).parse_template(); }

}  // namespace fp4serve::tokenizer::jinja
