#include "tokenizer/jinja_value.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>

#include "tokenizer/utf8.h"

namespace fp4serve::tokenizer::jinja {

const Value* Dict::find(const std::string& key) const {
  for (const auto& [k, v] : items) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [k, v] : items) {
    if (k == key) {
      v = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

Value Value::from_json(const nlohmann::ordered_json& j) {
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null: return None{};
    case nlohmann::ordered_json::value_t::boolean: return j.get<bool>();
    case nlohmann::ordered_json::value_t::number_integer: return j.get<std::int64_t>();
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<std::uint64_t>();
      if (u <= static_cast<std::uint64_t>(INT64_MAX)) return static_cast<std::int64_t>(u);
      return static_cast<double>(u);
    }
    case nlohmann::ordered_json::value_t::number_float: return j.get<double>();
    case nlohmann::ordered_json::value_t::string: return j.get<std::string>();
    case nlohmann::ordered_json::value_t::array: {
      List list;
      for (const auto& item : j) list.push_back(from_json(item));
      return list;
    }
    case nlohmann::ordered_json::value_t::object: {
      auto d = std::make_shared<Dict>();
      for (auto it = j.begin(); it != j.end(); ++it) d->items.emplace_back(it.key(), from_json(it.value()));
      return d;
    }
    default: return None{};
  }
}

bool Value::truthy() const {
  if (is_undefined() || is_none()) return false;
  if (is_bool()) return as_bool();
  if (is_int()) return as_int() != 0;
  if (is_float()) return as_float() != 0.0;
  if (is_string()) return !as_string().empty();
  if (is_list()) return !as_list().empty();
  if (is_dict()) return is_dict() && (as_dict().is_namespace || !as_dict().items.empty());
  return true;
}

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  if (d == 0) return std::signbit(d) ? "-0.0" : "0.0";
  // Shortest digits that round-trip, from the scientific form "d.ddde±x".
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, r.ptr);
  const std::size_t e = sci.find('e');
  std::string mantissa = sci.substr(0, e);
  const int exponent = std::stoi(sci.substr(e + 1));
  const bool negative = mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  std::string digits;
  for (const char c : mantissa)
    if (c != '.') digits += c;
  std::string out = negative ? "-" : "";
  // Python writes positional notation for exponents -4..15 and exponent notation otherwise.
  if (exponent >= -4 && exponent < 16) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<std::size_t>(exponent) + 1 >= digits.size()) {
      out += digits + std::string(static_cast<std::size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out += digits.substr(0, static_cast<std::size_t>(exponent) + 1) + "." +
             digits.substr(static_cast<std::size_t>(exponent) + 1);
    }
    return out;
  }
  out += digits.substr(0, 1);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp[16];
  std::snprintf(exp, sizeof exp, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return out + exp;
}

namespace {

// repr() of a str: single quotes unless the text has ' and no ", with Python's escapes.
std::string python_string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos, has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (ch == quote || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (ch == '\n') {
      out += "\\n";
    } else if (ch == '\r') {
      out += "\\r";
    } else if (ch == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += ch;
    }
  }
  return out + quote;
}

// json.dumps string escaping with ensure_ascii=False.
void json_string(std::string& out, const std::string& s) {
  out += '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (ch) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += ch;
        }
    }
  }
  out += '"';
}

void json_dump(std::string& out, const Value& v, int indent, bool sort_keys, int depth) {
  const auto newline = [&](int d) {
    out += '\n';
    out.append(static_cast<std::size_t>(indent * d), ' ');
  };
  // Python's default separators: ", " and ": ", or "," and ": " when indenting.
  const char* item_sep = indent >= 0 ? "," : ", ";
  if (v.is_none() || v.is_undefined()) {
    out += "null";
  } else if (v.is_bool()) {
    out += v.as_bool() ? "true" : "false";
  } else if (v.is_int()) {
    out += std::to_string(v.as_int());
  } else if (v.is_float()) {
    const double d = v.as_float();
    out += std::isnan(d) ? "NaN" : std::isinf(d) ? (d > 0 ? "Infinity" : "-Infinity") : python_float_repr(d);
  } else if (v.is_string()) {
    json_string(out, v.as_string());
  } else if (v.is_list()) {
    const List& l = v.as_list();
    if (l.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (std::size_t i = 0; i < l.size(); ++i) {
      if (i) out += item_sep;
      if (indent >= 0) newline(depth + 1);
      json_dump(out, l[i], indent, sort_keys, depth + 1);
    }
    if (indent >= 0) newline(depth);
    out += ']';
  } else if (v.is_dict()) {
    std::vector<const std::pair<std::string, Value>*> items;
    for (const auto& kv : v.as_dict().items) items.push_back(&kv);
    if (items.empty()) {
      out += "{}";
      return;
    }
    if (sort_keys) std::sort(items.begin(), items.end(), [](auto* a, auto* b) { return a->first < b->first; });
    out += '{';
    for (std::size_t i = 0; i < items.size(); ++i) {
      if (i) out += item_sep;
      if (indent >= 0) newline(depth + 1);
      json_string(out, items[i]->first);
      out += ": ";
      json_dump(out, items[i]->second, indent, sort_keys, depth + 1);
    }
    if (indent >= 0) newline(depth);
    out += '}';
  } else {
    out += "null";
  }
}

}  // namespace

std::string Value::str() const {
  if (is_undefined()) return "";
  if (is_string()) return as_string();
  return repr();
}

std::string Value::repr() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "None";
  if (is_bool()) return as_bool() ? "True" : "False";
  if (is_int()) return std::to_string(as_int());
  if (is_float()) return python_float_repr(as_float());
  if (is_string()) return python_string_repr(as_string());
  if (is_list()) {
    std::string out = "[";
    const List& l = as_list();
    for (std::size_t i = 0; i < l.size(); ++i) out += (i ? ", " : "") + l[i].repr();
    return out + "]";
  }
  if (is_dict()) {
    if (as_dict().is_namespace) return "<Namespace>";
    std::string out = "{";
    bool first = true;
    for (const auto& [k, v] : as_dict().items) {
      out += (first ? "" : ", ") + python_string_repr(k) + ": " + v.repr();
      first = false;
    }
    return out + "}";
  }
  return "<function>";
}

std::string Value::type_name() const {
  if (is_undefined()) return "Undefined";
  if (is_none()) return "NoneType";
  if (is_bool()) return "bool";
  if (is_int()) return "int";
  if (is_float()) return "float";
  if (is_string()) return "str";
  if (is_list()) return "list";
  if (is_dict()) return as_dict().is_namespace ? "Namespace" : "dict";
  return "function";
}

std::string Value::to_json(int indent, bool sort_keys) const {
  std::string out;
  json_dump(out, *this, indent, sort_keys, 0);
  return out;
}

bool operator==(const Value& a, const Value& b) {
  if ((a.is_number() || a.is_bool()) && (b.is_number() || b.is_bool())) {
    if ((a.is_int() || a.is_bool()) && (b.is_int() || b.is_bool())) {
      const std::int64_t x = a.is_bool() ? a.as_bool() : a.as_int(), y = b.is_bool() ? b.as_bool() : b.as_int();
      return x == y;
    }
    return a.as_float() == b.as_float();
  }
  if (a.v_.index() != b.v_.index()) return false;
  if (a.is_undefined() || a.is_none()) return true;
  if (a.is_string()) return a.as_string() == b.as_string();
  if (a.is_list()) {
    const List &x = a.as_list(), &y = b.as_list();
    if (x.size() != y.size()) return false;
    for (std::size_t i = 0; i < x.size(); ++i)
      if (!(x[i] == y[i])) return false;
    return true;
  }
  if (a.is_dict()) {
    const Dict &x = a.as_dict(), &y = b.as_dict();
    if (&x == &y) return true;
    if (x.is_namespace || y.is_namespace || x.items.size() != y.items.size()) return false;
    for (const auto& [k, v] : x.items) {
      const Value* other = y.find(k);
      if (!other || !(*other == v)) return false;
    }
    return true;
  }
  return std::get<std::shared_ptr<Function>>(a.v_) == std::get<std::shared_ptr<Function>>(b.v_);
}

}  // namespace fp4serve::tokenizer::jinja
