#pragma once
// Values of the chat-template interpreter, with the Python semantics that Jinja2 templates rely
// on (transformers renders chat templates with Jinja2): truthiness, ==, str() and repr(), and
// json.dumps for the tojson filter. Lists and dicts are shared by reference, like Python objects.
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

namespace fp4serve::tokenizer::jinja {

class Value;
using List = std::vector<Value>;

// A dict keeps insertion order (Python 3.7+), which tojson output depends on.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;  // made by namespace(): the only object a template may assign into
  const Value* find(const std::string& key) const;
  void set(const std::string& key, Value value);
};

struct Args {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};
using Function = std::function<Value(Args&)>;

struct Undefined {
  std::string name;  // what was looked up, for error messages
};
struct None {};

class Value {
 public:
  using Storage = std::variant<Undefined, None, bool, std::int64_t, double, std::string, std::shared_ptr<List>,
                               std::shared_ptr<Dict>, std::shared_ptr<Function>>;

  Value() : v_(Undefined{}) {}
  Value(None) : v_(None{}) {}
  Value(Undefined u) : v_(std::move(u)) {}
  Value(bool b) : v_(b) {}
  Value(std::int64_t i) : v_(i) {}
  Value(int i) : v_(std::int64_t{i}) {}
  Value(double d) : v_(d) {}
  Value(std::string s) : v_(std::move(s)) {}
  Value(const char* s) : v_(std::string(s)) {}
  Value(List l) : v_(std::make_shared<List>(std::move(l))) {}
  Value(std::shared_ptr<List> l) : v_(std::move(l)) {}
  Value(std::shared_ptr<Dict> d) : v_(std::move(d)) {}
  Value(Function f) : v_(std::make_shared<Function>(std::move(f))) {}

  static Value from_json(const nlohmann::ordered_json& j);

  bool is_undefined() const { return std::holds_alternative<Undefined>(v_); }
  bool is_none() const { return std::holds_alternative<None>(v_); }
  bool is_bool() const { return std::holds_alternative<bool>(v_); }
  bool is_int() const { return std::holds_alternative<std::int64_t>(v_); }
  bool is_float() const { return std::holds_alternative<double>(v_); }
  bool is_number() const { return is_int() || is_float(); }  // Python: bool is an int too
  bool is_string() const { return std::holds_alternative<std::string>(v_); }
  bool is_list() const { return std::holds_alternative<std::shared_ptr<List>>(v_); }
  bool is_dict() const { return std::holds_alternative<std::shared_ptr<Dict>>(v_); }
  bool is_callable() const { return std::holds_alternative<std::shared_ptr<Function>>(v_); }

  bool as_bool() const { return std::get<bool>(v_); }
  std::int64_t as_int() const { return std::get<std::int64_t>(v_); }
  double as_float() const { return is_int() ? static_cast<double>(as_int()) : is_bool() ? as_bool() : std::get<double>(v_); }
  const std::string& as_string() const { return std::get<std::string>(v_); }
  List& as_list() const { return *std::get<std::shared_ptr<List>>(v_); }
  Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(v_); }
  Function& as_function() const { return *std::get<std::shared_ptr<Function>>(v_); }
  const std::string& undefined_name() const { return std::get<Undefined>(v_).name; }

  // Python's bool(x).
  bool truthy() const;
  // Python's str(x) (Jinja prints values with it; Undefined prints as "").
  std::string str() const;
  // Python's repr(x).
  std::string repr() const;
  // Python type name, for error messages ("str", "dict", "NoneType"...).
  std::string type_name() const;
  // json.dumps(x, ensure_ascii=False, indent=indent, sort_keys=sort_keys), Python's formatting.
  std::string to_json(int indent = -1, bool sort_keys = false) const;

  friend bool operator==(const Value& a, const Value& b);

 private:
  Storage v_;
};

// Python float repr: shortest round-trip digits, exponent form outside [1e-4, 1e16).
std::string python_float_repr(double d);

}  // namespace fp4serve::tokenizer::jinja
