#include "tokenizer/jinja_template.h"

#include <cmath>
#include <unordered_map>

#include "tokenizer/jinja_builtins.h"
#include "tokenizer/jinja_parser.h"
#include "util/error.h"

namespace fp4serve::tokenizer::jinja {
namespace {

enum class Flow { Normal, Break, Continue };

class Renderer {
 public:
  explicit Renderer(const Dict& variables) {
    scopes_.emplace_back();
    Dict globals;
    add_globals(globals);
    for (auto& [k, v] : globals.items) scopes_.back()[k] = v;
    for (const auto& [k, v] : variables.items) scopes_.back()[k] = v;
  }

  std::string run(const Body& body) {
    exec(body);
    return std::move(out_);
  }

 private:
  using Scope = std::unordered_map<std::string, Value>;

  // ---- statements ----

  Flow exec(const Body& body) {
    for (const NodePtr& n : body) {
      const Flow f = exec(*n);
      if (f != Flow::Normal) return f;
    }
    return Flow::Normal;
  }

  Flow exec(const Node& n) {
    switch (n.kind) {
      case Node::Kind::Text: out_ += n.text; return Flow::Normal;
      case Node::Kind::Print: out_ += eval(*n.expr).str(); return Flow::Normal;
      case Node::Kind::If:
        for (std::size_t i = 0; i < n.conditions.size(); ++i) {
          if (eval(*n.conditions[i]).truthy()) return exec(n.branches[i]);
        }
        return exec(n.else_body);
      case Node::Kind::For: return exec_for(n);
      case Node::Kind::Set: exec_set(n); return Flow::Normal;
      case Node::Kind::SetBlock: {
        std::string saved = std::move(out_);
        out_.clear();
        exec(n.body);
        scopes_.back()[n.targets[0]] = std::move(out_);
        out_ = std::move(saved);
        return Flow::Normal;
      }
      case Node::Kind::Macro: define_macro(n); return Flow::Normal;
      case Node::Kind::Break:
        if (loop_depth_ == 0) template_error(n.line, "break outside a loop");
        return Flow::Break;
      case Node::Kind::Continue:
        if (loop_depth_ == 0) template_error(n.line, "continue outside a loop");
        return Flow::Continue;
      case Node::Kind::Passthrough: return exec(n.body);
    }
    return Flow::Normal;
  }

  void assign(const std::vector<std::string>& targets, const Value& value, int line) {
    if (targets.size() == 1) {
      scopes_.back()[targets[0]] = value;
      return;
    }
    const List items = iterate(value, line);
    if (items.size() != targets.size()) {
      template_error(line, "cannot unpack " + std::to_string(items.size()) + " values into " +
                               std::to_string(targets.size()) + " names");
    }
    for (std::size_t i = 0; i < targets.size(); ++i) scopes_.back()[targets[i]] = items[i];
  }

  void exec_set(const Node& n) {
    Value value = eval(*n.expr);
    if (n.attribute) {
      const Value target = lookup(n.targets[0]);
      if (!target.is_dict() || !target.as_dict().is_namespace) {
        template_error(n.line, "cannot assign attribute '" + n.targets[1] + "' on '" + n.targets[0] +
                                   "': only namespace() objects can be assigned to");
      }
      target.as_dict().set(n.targets[1], std::move(value));
      return;
    }
    assign(n.targets, value, n.line);
  }

  Flow exec_for(const Node& n) {
    List items = iterate(eval(*n.expr), n.expr->line);
    if (n.filter) {
      // "for x in xs if cond": the condition sees the loop variable, and loop.* counts survivors.
      List kept;
      scopes_.emplace_back();
      for (const Value& item : items) {
        assign(n.targets, item, n.line);
        if (eval(*n.filter).truthy()) kept.push_back(item);
      }
      scopes_.pop_back();
      items = std::move(kept);
    }
    if (items.empty()) return exec(n.else_body);
    ++loop_depth_;
    const auto length = static_cast<std::int64_t>(items.size());
    for (std::int64_t i = 0; i < length; ++i) {
      // A fresh scope per iteration: {% set %} inside a loop does not leak out (namespace() does).
      scopes_.emplace_back();
      auto loop = std::make_shared<Dict>();
      loop->set("index", i + 1);
      loop->set("index0", i);
      loop->set("revindex", length - i);
      loop->set("revindex0", length - i - 1);
      loop->set("first", i == 0);
      loop->set("last", i == length - 1);
      loop->set("length", length);
      loop->set("previtem", i > 0 ? items[static_cast<std::size_t>(i - 1)] : Value(Undefined{"loop.previtem"}));
      loop->set("nextitem", i + 1 < length ? items[static_cast<std::size_t>(i + 1)] : Value(Undefined{"loop.nextitem"}));
      loop->set("cycle", Function([i](Args& a) -> Value {
                  if (a.positional.empty()) fail("chat template: loop.cycle() needs arguments");
                  return a.positional[static_cast<std::size_t>(i) % a.positional.size()];
                }));
      scopes_.back()["loop"] = Value(loop);
      assign(n.targets, items[static_cast<std::size_t>(i)], n.line);
      const Flow f = exec(n.body);
      scopes_.pop_back();
      if (f == Flow::Break) break;
    }
    --loop_depth_;
    return Flow::Normal;
  }

  void define_macro(const Node& n) {
    const Node* macro = &n;
    Renderer* self = this;
    scopes_.back()[n.targets[0]] = Function([self, macro](Args& a) -> Value {
      // The body runs in a new scope over the template's top-level variables.
      std::vector<Scope> saved;
      saved.swap(self->scopes_);
      self->scopes_.push_back(saved.front());
      self->scopes_.emplace_back();
      for (std::size_t p = 0; p < macro->params.size(); ++p) {
        Value v;
        if (p < a.positional.size()) {
          v = a.positional[p];
        } else {
          bool found = false;
          for (auto& [k, kv] : a.keyword)
            if (k == macro->params[p]) v = kv, found = true;
          if (!found) v = macro->defaults[p] ? self->eval(*macro->defaults[p]) : Value(Undefined{macro->params[p]});
        }
        self->scopes_.back()[macro->params[p]] = v;
      }
      std::string saved_out = std::move(self->out_);
      self->out_.clear();
      const int saved_depth = self->loop_depth_;
      self->loop_depth_ = 0;
      self->exec(macro->body);
      self->loop_depth_ = saved_depth;
      std::string result = std::move(self->out_);
      self->out_ = std::move(saved_out);
      saved.front() = self->scopes_.front();  // top-level sets made by the macro stay visible
      self->scopes_.swap(saved);
      return result;
    });
  }

  // ---- expressions ----

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      const auto found = it->find(name);
      if (found != it->end()) return found->second;
    }
    return Undefined{name};
  }

  Args eval_args(const Expr& e, std::size_t first_positional) {
    Args a;
    for (std::size_t i = first_positional; i < e.operands.size(); ++i) a.positional.push_back(eval(*e.operands[i]));
    for (const auto& [k, v] : e.keyword) a.keyword.emplace_back(k, eval(*v));
    return a;
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Literal: return e.value;
      case Expr::Kind::Name: return lookup(e.name);
      case Expr::Kind::Attr: return get_attribute(eval(*e.operands[0]), e.name, e.line);
      case Expr::Kind::Item: return get_item(eval(*e.operands[0]), eval(*e.operands[1]), e.line);
      case Expr::Kind::Slice: {
        auto part = [&](std::size_t i) { return e.operands[i] ? eval(*e.operands[i]) : Value(None{}); };
        return get_slice(eval(*e.operands[0]), part(1), part(2), part(3), e.line);
      }
      case Expr::Kind::Call: {
        const Value callee = eval(*e.operands[0]);
        if (!callee.is_callable()) {
          const std::string what = e.operands[0]->kind == Expr::Kind::Name ? e.operands[0]->name
                                   : e.operands[0]->kind == Expr::Kind::Attr ? e.operands[0]->name
                                                                              : callee.type_name();
          template_error(e.line, callee.is_undefined() ? "'" + what + "' is undefined (called as a function)"
                                                       : "'" + what + "' is not callable");
        }
        Args a = eval_args(e, 1);
        return callee.as_function()(a);
      }
      case Expr::Kind::Filter: {
        const Value v = eval(*e.operands[0]);
        Args a = eval_args(e, 1);
        return apply_filter(e.name, v, a, e.line);
      }
      case Expr::Kind::Test: {
        const Value v = eval(*e.operands[0]);
        Args a = eval_args(e, 1);
        return apply_test(e.name, v, a, e.line) != e.negated;
      }
      case Expr::Kind::Unary: {
        const Value v = eval(*e.operands[0]);
        if (e.name == "not") return !v.truthy();
        if (v.is_int()) return e.name == "-" ? -v.as_int() : v.as_int();
        if (v.is_bool()) return std::int64_t{e.name == "-" ? -std::int64_t{v.as_bool()} : std::int64_t{v.as_bool()}};
        if (v.is_float()) return e.name == "-" ? -v.as_float() : v.as_float();
        template_error(e.line, "bad operand type for unary " + e.name + ": '" + v.type_name() + "'");
      }
      case Expr::Kind::Binary: return eval_binary(e);
      case Expr::Kind::Compare: {
        Value left = eval(*e.operands[0]);
        for (std::size_t i = 0; i < e.ops.size(); ++i) {
          Value right = eval(*e.operands[i + 1]);
          if (!compare(e.ops[i], left, right, e.line)) return false;
          left = std::move(right);
        }
        return true;
      }
      case Expr::Kind::Cond:
        if (eval(*e.operands[1]).truthy()) return eval(*e.operands[0]);
        return e.operands[2] ? eval(*e.operands[2]) : Value(Undefined{"else"});
      case Expr::Kind::ListLiteral:
      case Expr::Kind::TupleLiteral: {
        List l;
        for (const ExprPtr& x : e.operands) l.push_back(eval(*x));
        return l;
      }
      case Expr::Kind::DictLiteral: {
        auto d = std::make_shared<Dict>();
        for (std::size_t i = 0; i + 1 < e.operands.size(); i += 2) {
          const Value k = eval(*e.operands[i]);
          if (!k.is_string()) template_error(e.line, "dict keys must be strings");
          d->set(k.as_string(), eval(*e.operands[i + 1]));
        }
        return d;
      }
    }
    return Undefined{};
  }

  [[noreturn]] void undefined_operand(const Value& v, const Expr& e) {
    template_error(e.line, "'" + v.undefined_name() + "' is undefined (used with '" + e.name + "')");
  }

  Value eval_binary(const Expr& e) {
    if (e.name == "and") {
      Value l = eval(*e.operands[0]);
      return l.truthy() ? eval(*e.operands[1]) : l;
    }
    if (e.name == "or") {
      Value l = eval(*e.operands[0]);
      return l.truthy() ? l : eval(*e.operands[1]);
    }
    const Value l = eval(*e.operands[0]);
    const Value r = eval(*e.operands[1]);
    if (e.name == "~") return l.str() + r.str();  // Undefined joins as ""
    if (l.is_undefined()) undefined_operand(l, e);
    if (r.is_undefined()) undefined_operand(r, e);
    const bool numbers = (l.is_number() || l.is_bool()) && (r.is_number() || r.is_bool());
    const bool ints = numbers && !l.is_float() && !r.is_float();
    auto to_int = [](const Value& v) { return v.is_bool() ? std::int64_t{v.as_bool()} : v.as_int(); };
    if (e.name == "+") {
      if (ints) return to_int(l) + to_int(r);
      if (numbers) return l.as_float() + r.as_float();
      if (l.is_string() && r.is_string()) return l.as_string() + r.as_string();
      if (l.is_list() && r.is_list()) {
        List out = l.as_list();
        out.insert(out.end(), r.as_list().begin(), r.as_list().end());
        return out;
      }
    } else if (e.name == "-") {
      if (ints) return to_int(l) - to_int(r);
      if (numbers) return l.as_float() - r.as_float();
    } else if (e.name == "*") {
      if (ints) return to_int(l) * to_int(r);
      if (numbers) return l.as_float() * r.as_float();
      const Value* text = l.is_string() ? &l : r.is_string() ? &r : nullptr;
      const Value* count = l.is_string() ? &r : &l;
      if (text && (count->is_int() || count->is_bool())) {
        std::string out;
        for (std::int64_t i = 0; i < to_int(*count); ++i) out += text->as_string();
        return out;
      }
    } else if (e.name == "/") {
      if (numbers) {
        if (r.as_float() == 0) template_error(e.line, "division by zero");
        return l.as_float() / r.as_float();
      }
    } else if (e.name == "//" || e.name == "%") {
      if (numbers) {
        if (r.as_float() == 0) template_error(e.line, "division by zero");
        if (ints) {
          const std::int64_t a = to_int(l), b = to_int(r);
          std::int64_t q = a / b;
          if ((a % b != 0) && ((a < 0) != (b < 0))) --q;  // floor, as Python
          return e.name == "//" ? Value(q) : Value(a - q * b);
        }
        const double q = std::floor(l.as_float() / r.as_float());
        return e.name == "//" ? Value(q) : Value(l.as_float() - q * r.as_float());
      }
    } else if (e.name == "**") {
      if (ints && to_int(r) >= 0) {
        std::int64_t out = 1;
        for (std::int64_t i = 0; i < to_int(r); ++i) out *= to_int(l);
        return out;
      }
      if (numbers) return std::pow(l.as_float(), r.as_float());
    }
    template_error(e.line, "unsupported operand types for " + e.name + ": '" + l.type_name() + "' and '" +
                               r.type_name() + "'");
  }

  bool compare(const std::string& op, const Value& l, const Value& r, int line) {
    if (op == "==") return l == r;
    if (op == "!=") return !(l == r);
    if (op == "in") return contains(r, l, line);
    if (op == "not in") return !contains(r, l, line);
    int order = 0;
    if ((l.is_number() || l.is_bool()) && (r.is_number() || r.is_bool())) {
      const double a = l.as_float(), b = r.as_float();
      order = a < b ? -1 : a > b ? 1 : 0;
    } else if (l.is_string() && r.is_string()) {
      order = l.as_string().compare(r.as_string());
    } else {
      template_error(line, "'" + op + "' not supported between '" + l.type_name() + "' and '" + r.type_name() + "'");
    }
    if (op == "<") return order < 0;
    if (op == ">") return order > 0;
    if (op == "<=") return order <= 0;
    return order >= 0;
  }

  std::vector<Scope> scopes_;
  std::string out_;
  int loop_depth_ = 0;
};

}  // namespace

Template::Template(std::string_view source) : body_(std::make_shared<const Body>(parse(source))) {}

std::string Template::render(const Dict& variables) const { return Renderer(variables).run(*body_); }

}  // namespace fp4serve::tokenizer::jinja
