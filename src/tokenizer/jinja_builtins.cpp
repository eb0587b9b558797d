#include "tokenizer/jinja_builtins.h"

#include <utf8proc.h>

#include <algorithm>
#include <cmath>
#include <ctime>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace fp4serve::tokenizer::jinja {

void template_error(int line, const std::string& what) { fail("chat template, line ", line, ": ", what); }

namespace {

// ---- small helpers ----

std::vector<char32_t> code_points(const std::string& s) {
  std::vector<char32_t> out;
  for (std::size_t pos = 0; pos < s.size();) out.push_back(utf8::next(s, pos));
  return out;
}
std::string from_code_points(const std::vector<char32_t>& cps, std::size_t b, std::size_t e) {
  std::string out;
  for (std::size_t i = b; i < e; ++i) utf8::append(out, cps[i]);
  return out;
}

// Python's str.isspace for one character.
bool py_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

char32_t to_upper(char32_t c) { return static_cast<char32_t>(utf8proc_toupper(static_cast<utf8proc_int32_t>(c))); }
char32_t to_lower(char32_t c) { return static_cast<char32_t>(utf8proc_tolower(static_cast<utf8proc_int32_t>(c))); }
bool is_cased_letter(char32_t c) { return to_upper(c) != c || to_lower(c) != c; }

std::string map_chars(const std::string& s, char32_t (*f)(char32_t)) {
  std::string out;
  for (std::size_t pos = 0; pos < s.size();) utf8::append(out, f(utf8::next(s, pos)));
  return out;
}

// Positional-or-keyword argument `index`/`name`, or `fallback`.
Value arg(Args& a, std::size_t index, const char* name, Value fallback = Undefined{}) {
  if (index < a.positional.size()) return a.positional[index];
  for (auto& [k, v] : a.keyword)
    if (k == name) return v;
  return fallback;
}

std::string need_string(const Value& v, int line, const char* what) {
  if (!v.is_string()) template_error(line, std::string(what) + " expects a string, got " + v.type_name());
  return v.as_string();
}

std::int64_t need_int(const Value& v, int line, const char* what) {
  if (v.is_int()) return v.as_int();
  if (v.is_bool()) return v.as_bool();
  template_error(line, std::string(what) + " expects an integer, got " + v.type_name());
}

// Python str.strip/lstrip/rstrip: `chars` (None: whitespace) removed from the ends.
std::string strip(const std::string& s, const Value& chars, bool left, bool right, int line) {
  const std::vector<char32_t> cps = code_points(s);
  std::vector<char32_t> set;
  const bool whitespace = chars.is_undefined() || chars.is_none();
  if (!whitespace) set = code_points(need_string(chars, line, "strip"));
  auto strip_it = [&](char32_t c) { return whitespace ? py_space(c) : std::find(set.begin(), set.end(), c) != set.end(); };
  std::size_t b = 0, e = cps.size();
  if (left)
    while (b < e && strip_it(cps[b])) ++b;
  if (right)
    while (e > b && strip_it(cps[e - 1])) --e;
  return from_code_points(cps, b, e);
}

// Python str.split(sep=None, maxsplit=-1).
List split(const std::string& s, const Value& sep, std::int64_t maxsplit, int line) {
  List out;
  if (sep.is_undefined() || sep.is_none()) {
    const std::vector<char32_t> cps = code_points(s);
    std::size_t i = 0;
    while (true) {
      while (i < cps.size() && py_space(cps[i])) ++i;
      if (i >= cps.size()) break;
      if (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit) {
        std::size_t e = cps.size();
        while (e > i && py_space(cps[e - 1])) --e;
        out.emplace_back(from_code_points(cps, i, e));
        break;
      }
      std::size_t j = i;
      while (j < cps.size() && !py_space(cps[j])) ++j;
      out.emplace_back(from_code_points(cps, i, j));
      i = j;
    }
    return out;
  }
  const std::string& d = need_string(sep, line, "split");
  if (d.empty()) template_error(line, "split: empty separator");
  std::size_t start = 0;
  while (true) {
    const std::size_t hit = s.find(d, start);
    if (hit == std::string::npos || (maxsplit >= 0 && static_cast<std::int64_t>(out.size()) == maxsplit)) {
      out.emplace_back(s.substr(start));
      return out;
    }
    out.emplace_back(s.substr(start, hit - start));
    start = hit + d.size();
  }
}

std::string replace(const std::string& s, const std::string& from, const std::string& to, std::int64_t count) {
  if (from.empty()) {
    // Python inserts `to` between every character (and at both ends).
    std::string out = to;
    for (std::size_t pos = 0; pos < s.size();) {
      const std::size_t b = pos;
      utf8::next(s, pos);
      out += s.substr(b, pos - b);
      if (count < 0 || --count > 0) out += to;
    }
    return out;
  }
  std::string out;
  std::size_t start = 0;
  while (count != 0) {
    const std::size_t hit = s.find(from, start);
    if (hit == std::string::npos) break;
    out += s.substr(start, hit - start) + to;
    start = hit + from.size();
    if (count > 0) --count;
  }
  return out + s.substr(start);
}

bool starts_or_ends(const std::string& s, const Value& affix, bool start, int line) {
  if (affix.is_list()) {
    for (const Value& a : affix.as_list())
      if (starts_or_ends(s, a, start, line)) return true;
    return false;
  }
  const std::string& a = need_string(affix, line, start ? "startswith" : "endswith");
  if (a.size() > s.size()) return false;
  return start ? s.compare(0, a.size(), a) == 0 : s.compare(s.size() - a.size(), a.size(), a) == 0;
}

std::string title(const std::string& s) {
  std::string out;
  bool prev_cased = false;
  for (std::size_t pos = 0; pos < s.size();) {
    const char32_t c = utf8::next(s, pos);
    utf8::append(out, prev_cased ? to_lower(c) : to_upper(c));
    prev_cased = is_cased_letter(c);
  }
  return out;
}

std::string capitalize(const std::string& s) {
  std::string out;
  bool first = true;
  for (std::size_t pos = 0; pos < s.size();) {
    const char32_t c = utf8::next(s, pos);
    utf8::append(out, first ? to_upper(c) : to_lower(c));
    first = false;
  }
  return out;
}

Value str_method(const std::string& s, const std::string& name, Args& a, int line) {
  if (name == "startswith" || name == "endswith") return starts_or_ends(s, arg(a, 0, "prefix"), name == "startswith", line);
  if (name == "strip") return strip(s, arg(a, 0, "chars"), true, true, line);
  if (name == "lstrip") return strip(s, arg(a, 0, "chars"), true, false, line);
  if (name == "rstrip") return strip(s, arg(a, 0, "chars"), false, true, line);
  if (name == "split") {
    const Value m = arg(a, 1, "maxsplit", std::int64_t{-1});
    return split(s, arg(a, 0, "sep"), need_int(m, line, "split"), line);
  }
  if (name == "rsplit") {
    const Value sep = arg(a, 0, "sep");
    const std::int64_t maxsplit = need_int(arg(a, 1, "maxsplit", std::int64_t{-1}), line, "rsplit");
    if (maxsplit < 0) return split(s, sep, -1, line);
    // Split the reversed text with the reversed separator, then reverse back.
    auto rev = [](const std::string& x) {
      auto cps = code_points(x);
      std::reverse(cps.begin(), cps.end());
      return from_code_points(cps, 0, cps.size());
    };
    const Value rsep = sep.is_string() ? Value(rev(sep.as_string())) : sep;
    List parts = split(rev(s), rsep, maxsplit, line);
    std::reverse(parts.begin(), parts.end());
    for (Value& p : parts) p = rev(p.as_string());
    return parts;
  }
  if (name == "splitlines") {
    List out;
    std::size_t start = 0;
    while (start < s.size()) {
      const std::size_t nl = s.find_first_of("\n\r", start);
      if (nl == std::string::npos) {
        out.emplace_back(s.substr(start));
        break;
      }
      out.emplace_back(s.substr(start, nl - start));
      start = nl + ((s[nl] == '\r' && nl + 1 < s.size() && s[nl + 1] == '\n') ? 2 : 1);
    }
    return out;
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const std::string& affix = need_string(arg(a, 0, "affix"), line, name.c_str());
    if (name == "removeprefix") return s.compare(0, affix.size(), affix) == 0 ? s.substr(affix.size()) : s;
    return affix.size() <= s.size() && s.compare(s.size() - affix.size(), affix.size(), affix) == 0
               ? s.substr(0, s.size() - affix.size())
               : s;
  }
  if (name == "rfind") {
    const std::size_t hit = s.rfind(need_string(arg(a, 0, "sub"), line, "rfind"));
    if (hit == std::string::npos) return std::int64_t{-1};
    return static_cast<std::int64_t>(code_points(s.substr(0, hit)).size());
  }
  if (name == "upper") return map_chars(s, to_upper);
  if (name == "lower") return map_chars(s, to_lower);
  if (name == "title") return title(s);
  if (name == "capitalize") return capitalize(s);
  if (name == "replace") {
    const Value count = arg(a, 2, "count", std::int64_t{-1});
    return replace(s, need_string(arg(a, 0, "old"), line, "replace"), need_string(arg(a, 1, "new"), line, "replace"),
                   need_int(count, line, "replace"));
  }
  if (name == "find" || name == "count") {
    const std::string& sub = need_string(arg(a, 0, "sub"), line, name.c_str());
    if (name == "find") {
      const std::size_t hit = s.find(sub);
      if (hit == std::string::npos) return std::int64_t{-1};
      return static_cast<std::int64_t>(code_points(s.substr(0, hit)).size());
    }
    if (sub.empty()) return static_cast<std::int64_t>(code_points(s).size() + 1);
    std::int64_t n = 0;
    for (std::size_t p = s.find(sub); p != std::string::npos; p = s.find(sub, p + sub.size())) ++n;
    return n;
  }
  if (name == "join") {
    std::string out;
    bool first = true;
    for (const Value& v : iterate(arg(a, 0, "iterable"), line)) {
      if (!first) out += s;
      out += need_string(v, line, "join");
      first = false;
    }
    return out;
  }
  if (name == "isdigit" || name == "isalpha" || name == "isspace" || name == "isupper" || name == "islower") {
    if (s.empty()) return false;
    bool ok = true;
    for (const char32_t c : code_points(s)) {
      const auto cat = utf8proc_category(static_cast<utf8proc_int32_t>(c));
      if (name == "isdigit") ok = ok && cat == UTF8PROC_CATEGORY_ND;
      if (name == "isalpha") ok = ok && cat >= UTF8PROC_CATEGORY_LU && cat <= UTF8PROC_CATEGORY_LO;
      if (name == "isspace") ok = ok && py_space(c);
    }
    if (name == "isupper") return map_chars(s, to_upper) == s && map_chars(s, to_lower) != s;
    if (name == "islower") return map_chars(s, to_lower) == s && map_chars(s, to_upper) != s;
    return ok;
  }
  template_error(line, "unsupported string method '" + name + "'");
}

Value dict_method(const Value& d, const std::string& name, Args& a, int line) {
  const Dict& dict = d.as_dict();
  if (name == "get") {
    const Value key = arg(a, 0, "key");
    const Value* v = key.is_string() ? dict.find(key.as_string()) : nullptr;
    return v ? *v : arg(a, 1, "default", None{});
  }
  List out;
  for (const auto& [k, v] : dict.items) {
    if (name == "items") out.emplace_back(List{Value(k), v});
    else if (name == "keys") out.emplace_back(k);
    else if (name == "values") out.push_back(v);
    else template_error(line, "unsupported dict method '" + name + "'");
  }
  return out;
}

bool is_string_method(const std::string& n) {
  static const char* const kNames[] = {"startswith", "endswith", "strip", "lstrip", "rstrip", "split", "rsplit",
                                       "splitlines", "removeprefix", "removesuffix", "upper", "lower", "title",
                                       "capitalize", "replace", "find", "rfind", "count", "join", "isdigit",
                                       "isalpha", "isspace", "isupper", "islower"};
  return std::any_of(std::begin(kNames), std::end(kNames), [&](const char* k) { return n == k; });
}

// Python's slice.indices(length).
void slice_indices(std::int64_t length, const Value& start, const Value& stop, const Value& step, int line,
                   std::int64_t& b, std::int64_t& e, std::int64_t& s) {
  s = step.is_undefined() || step.is_none() ? 1 : need_int(step, line, "slice");
  if (s == 0) template_error(line, "slice step cannot be zero");
  auto clamp = [&](const Value& v, std::int64_t fallback) {
    if (v.is_undefined() || v.is_none()) return fallback;
    std::int64_t x = need_int(v, line, "slice");
    if (x < 0) x += length;
    if (s > 0) return std::clamp<std::int64_t>(x, 0, length);
    return std::clamp<std::int64_t>(x, -1, length - 1);
  };
  b = clamp(start, s > 0 ? 0 : length - 1);
  e = clamp(stop, s > 0 ? length : -1);
}

// ---- filters ----

Value filter_map(const Value& v, Args& a, int line) {
  const Value attribute = arg(a, 99, "attribute");
  List out;
  if (!attribute.is_undefined()) {
    const Value fallback = arg(a, 99, "default");
    for (const Value& item : iterate(v, line)) {
      Value x = item.is_dict() ? get_item(item, attribute, line) : get_attribute(item, attribute.str(), line);
      out.push_back(x.is_undefined() && !fallback.is_undefined() ? fallback : x);
    }
    return out;
  }
  if (a.positional.empty()) template_error(line, "map needs a filter name or attribute=");
  const std::string filter = need_string(a.positional[0], line, "map");
  Args rest;
  rest.positional.assign(a.positional.begin() + 1, a.positional.end());
  rest.keyword = a.keyword;
  for (const Value& item : iterate(v, line)) {
    Args copy = rest;
    out.push_back(apply_filter(filter, item, copy, line));
  }
  return out;
}

// select/reject/selectattr/rejectattr.
Value filter_select(const Value& v, Args& a, int line, bool by_attribute, bool keep) {
  List out;
  std::size_t next_arg = 0;
  std::string attribute;
  if (by_attribute) {
    if (a.positional.empty()) template_error(line, "selectattr needs an attribute name");
    attribute = need_string(a.positional[0], line, "selectattr");
    next_arg = 1;
  }
  std::string test;
  if (next_arg < a.positional.size()) test = need_string(a.positional[next_arg], line, "select");
  Args test_args;
  test_args.positional.assign(a.positional.begin() + static_cast<std::ptrdiff_t>(std::min(next_arg + 1, a.positional.size())),
                              a.positional.end());
  for (const Value& item : iterate(v, line)) {
    Value subject = item;
    if (by_attribute) {
      subject = item;
      std::size_t start = 0;
      while (true) {  // dotted attribute paths ("function.name")
        const std::size_t dot = attribute.find('.', start);
        const std::string part = attribute.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
        subject = subject.is_undefined() ? subject : get_attribute(subject, part, line);
        if (dot == std::string::npos) break;
        start = dot + 1;
      }
    }
    Args copy = test_args;
    const bool pass = test.empty() ? subject.truthy() : apply_test(test, subject, copy, line);
    if (pass == keep) out.push_back(item);
  }
  return out;
}

std::string indent(const std::string& s, const Value& width, bool first, bool blank, int line) {
  const std::string pad = width.is_string() ? width.as_string()
                                            : std::string(static_cast<std::size_t>(need_int(width, line, "indent")), ' ');
  std::string out;
  std::size_t start = 0;
  bool is_first = true;
  while (true) {
    const std::size_t nl = s.find('\n', start);
    const std::string ln = s.substr(start, nl == std::string::npos ? std::string::npos : nl - start);
    const bool add = (is_first ? first : true) && (blank || !strip(ln, Value(), true, true, line).empty());
    out += (add ? pad : "") + ln;
    if (nl == std::string::npos) break;
    out += '\n';
    start = nl + 1;
    is_first = false;
  }
  return out;
}

}  // namespace

List iterate(const Value& v, int line) {
  if (v.is_undefined()) return {};
  if (v.is_list()) return v.as_list();
  if (v.is_dict()) {
    List keys;
    for (const auto& [k, val] : v.as_dict().items) keys.emplace_back(k);
    return keys;
  }
  if (v.is_string()) {
    List chars;
    const std::string& s = v.as_string();
    for (std::size_t pos = 0; pos < s.size();) {
      const std::size_t b = pos;
      utf8::next(s, pos);
      chars.emplace_back(s.substr(b, pos - b));
    }
    return chars;
  }
  template_error(line, "'" + v.type_name() + "' object is not iterable");
}

bool contains(const Value& container, const Value& item, int line) {
  if (container.is_string()) {
    if (!item.is_string()) template_error(line, "'in <string>' requires a string on the left, got " + item.type_name());
    return container.as_string().find(item.as_string()) != std::string::npos;
  }
  if (container.is_dict()) return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
  for (const Value& v : iterate(container, line))
    if (v == item) return true;
  return false;
}

Value get_attribute(const Value& obj, const std::string& name, int line) {
  if (obj.is_undefined()) {
    template_error(line, "'" + (obj.undefined_name().empty() ? std::string("value") : obj.undefined_name()) +
                             "' is undefined (reading ." + name + ")");
  }
  if (obj.is_dict()) {
    const Dict& d = obj.as_dict();
    if (!d.is_namespace && (name == "get" || name == "items" || name == "keys" || name == "values")) {
      return Function([obj, name, line](Args& a) { return dict_method(obj, name, a, line); });
    }
    if (const Value* v = d.find(name)) return *v;
    return Undefined{name};
  }
  if (obj.is_string() && is_string_method(name)) {
    const std::string s = obj.as_string();
    return Function([s, name, line](Args& a) { return str_method(s, name, a, line); });
  }
  // Python methods this interpreter lacks: say so rather than report them as undefined.
  static const char* const kPythonMethods[] = {
      "casefold", "center", "encode", "expandtabs", "format", "format_map", "index", "isalnum", "isascii",
      "isdecimal", "isidentifier", "isnumeric", "isprintable", "istitle", "ljust", "maketrans", "partition",
      "rindex", "rjust", "rpartition", "swapcase", "translate", "zfill", "append", "extend", "insert", "pop",
      "remove", "sort", "update", "setdefault", "copy", "clear"};
  if ((obj.is_string() || obj.is_list() || obj.is_dict()) &&
      std::any_of(std::begin(kPythonMethods), std::end(kPythonMethods), [&](const char* m) { return name == m; })) {
    template_error(line, "unsupported " + obj.type_name() + " method '" + name + "'");
  }
  return Undefined{name};
}

Value get_item(const Value& obj, const Value& key, int line) {
  if (obj.is_undefined()) template_error(line, "'" + obj.undefined_name() + "' is undefined (subscripting it)");
  if (obj.is_dict()) {
    if (key.is_string()) {
      if (const Value* v = obj.as_dict().find(key.as_string())) return *v;
      return get_attribute(obj, key.as_string(), line);
    }
    return Undefined{key.str()};
  }
  if ((obj.is_list() || obj.is_string()) && (key.is_int() || key.is_bool())) {
    std::int64_t i = key.is_bool() ? key.as_bool() : key.as_int();
    if (obj.is_list()) {
      const auto n = static_cast<std::int64_t>(obj.as_list().size());
      if (i < 0) i += n;
      if (i < 0 || i >= n) return Undefined{"index " + key.str()};
      return obj.as_list()[static_cast<std::size_t>(i)];
    }
    const auto cps = code_points(obj.as_string());
    const auto n = static_cast<std::int64_t>(cps.size());
    if (i < 0) i += n;
    if (i < 0 || i >= n) return Undefined{"index " + key.str()};
    return from_code_points(cps, static_cast<std::size_t>(i), static_cast<std::size_t>(i) + 1);
  }
  if (key.is_string()) return get_attribute(obj, key.as_string(), line);
  return Undefined{key.str()};
}

Value get_slice(const Value& obj, const Value& start, const Value& stop, const Value& step, int line) {
  std::int64_t b, e, s;
  if (obj.is_list()) {
    const List& l = obj.as_list();
    slice_indices(static_cast<std::int64_t>(l.size()), start, stop, step, line, b, e, s);
    List out;
    for (std::int64_t i = b; s > 0 ? i < e : i > e; i += s) out.push_back(l[static_cast<std::size_t>(i)]);
    return out;
  }
  if (obj.is_string()) {
    const auto cps = code_points(obj.as_string());
    slice_indices(static_cast<std::int64_t>(cps.size()), start, stop, step, line, b, e, s);
    std::string out;
    for (std::int64_t i = b; s > 0 ? i < e : i > e; i += s) utf8::append(out, cps[static_cast<std::size_t>(i)]);
    return out;
  }
  template_error(line, "cannot slice a " + obj.type_name());
}

Value apply_filter(const std::string& name, const Value& v, Args& a, int line) {
  if (name == "tojson") {
    if (v.is_undefined()) template_error(line, "tojson: '" + v.undefined_name() + "' is undefined");
    const Value indent_arg = arg(a, 0, "indent");
    const int width = indent_arg.is_int() ? static_cast<int>(indent_arg.as_int()) : -1;
    return v.to_json(width, arg(a, 99, "sort_keys", false).truthy());
  }
  if (name == "length" || name == "count") {
    if (v.is_string()) return static_cast<std::int64_t>(code_points(v.as_string()).size());
    if (v.is_dict()) return static_cast<std::int64_t>(v.as_dict().items.size());
    if (v.is_list()) return static_cast<std::int64_t>(v.as_list().size());
    if (v.is_undefined()) return std::int64_t{0};
    template_error(line, "object of type '" + v.type_name() + "' has no length");
  }
  if (name == "string") return v.str();
  if (name == "safe") return v;
  if (name == "trim") return strip(v.str(), arg(a, 0, "chars"), true, true, line);
  if (name == "upper") return map_chars(v.str(), to_upper);
  if (name == "lower") return map_chars(v.str(), to_lower);
  if (name == "capitalize") return capitalize(v.str());
  if (name == "title") return title(v.str());
  if (name == "default" || name == "d") {
    const bool boolean = arg(a, 1, "boolean", false).truthy();
    if (v.is_undefined() || (boolean && !v.truthy())) return arg(a, 0, "default_value", std::string());
    return v;
  }
  if (name == "first" || name == "last") {
    const List items = iterate(v, line);
    if (items.empty()) return Undefined{name};
    return name == "first" ? items.front() : items.back();
  }
  if (name == "join") {
    const std::string sep = arg(a, 0, "d", std::string()).str();
    const Value attribute = arg(a, 1, "attribute");
    std::string out;
    bool first = true;
    for (const Value& item : iterate(v, line)) {
      if (!first) out += sep;
      out += (attribute.is_undefined() ? item : get_item(item, attribute, line)).str();
      first = false;
    }
    return out;
  }
  if (name == "replace") {
    const Value count = arg(a, 2, "count", std::int64_t{-1});
    return replace(v.str(), arg(a, 0, "old").str(), arg(a, 1, "new").str(),
                   count.is_none() ? -1 : need_int(count, line, "replace"));
  }
  if (name == "list") return iterate(v, line);
  if (name == "items") {
    if (v.is_undefined()) return List{};
    if (!v.is_dict()) template_error(line, "items expects a mapping, got " + v.type_name());
    Args none;
    return dict_method(v, "items", none, line);
  }
  if (name == "reverse") {
    if (v.is_string()) {
      auto cps = code_points(v.as_string());
      std::reverse(cps.begin(), cps.end());
      return from_code_points(cps, 0, cps.size());
    }
    List l = iterate(v, line);
    std::reverse(l.begin(), l.end());
    return l;
  }
  if (name == "map") return filter_map(v, a, line);
  if (name == "select") return filter_select(v, a, line, false, true);
  if (name == "reject") return filter_select(v, a, line, false, false);
  if (name == "selectattr") return filter_select(v, a, line, true, true);
  if (name == "rejectattr") return filter_select(v, a, line, true, false);
  if (name == "int") {
    if (v.is_int()) return v;
    if (v.is_bool()) return std::int64_t{v.as_bool()};
    if (v.is_float()) return static_cast<std::int64_t>(v.as_float());
    if (v.is_string()) {
      try {
        std::size_t used = 0;
        const std::string s = strip(v.as_string(), Value(), true, true, line);
        const std::int64_t x = std::stoll(s, &used);
        if (used == s.size()) return x;
      } catch (const std::exception&) {
      }
    }
    return arg(a, 0, "default", std::int64_t{0});
  }
  if (name == "float") {
    if (v.is_number() || v.is_bool()) return v.as_float();
    if (v.is_string()) {
      try {
        return std::stod(v.as_string());
      } catch (const std::exception&) {
      }
    }
    return arg(a, 0, "default", 0.0);
  }
  if (name == "abs") {
    if (v.is_int()) return v.as_int() < 0 ? -v.as_int() : v.as_int();
    if (v.is_float()) return std::fabs(v.as_float());
    template_error(line, "abs expects a number");
  }
  if (name == "round") {
    const std::int64_t precision = need_int(arg(a, 0, "precision", std::int64_t{0}), line, "round");
    const std::string method = arg(a, 1, "method", std::string("common")).str();
    const double scale = std::pow(10.0, static_cast<double>(precision));
    const double x = v.as_float() * scale;
    const double r = method == "ceil" ? std::ceil(x) : method == "floor" ? std::floor(x) : std::round(x);
    return r / scale;
  }
  if (name == "indent") {
    return indent(v.str(), arg(a, 0, "width", std::int64_t{4}), arg(a, 1, "first", false).truthy(),
                  arg(a, 2, "blank", false).truthy(), line);
  }
  if (name == "unique") {
    List out;
    for (const Value& item : iterate(v, line))
      if (std::none_of(out.begin(), out.end(), [&](const Value& o) { return o == item; })) out.push_back(item);
    return out;
  }
  template_error(line, "unsupported filter '" + name + "'");
}

bool apply_test(const std::string& name, const Value& v, Args& a, int line) {
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.is_bool();
  if (name == "true") return v.is_bool() && v.as_bool();
  if (name == "false") return v.is_bool() && !v.as_bool();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number() || v.is_bool();
  if (name == "integer") return v.is_int() || v.is_bool();
  if (name == "float") return v.is_float();
  if (name == "mapping") return v.is_dict();
  if (name == "sequence") return v.is_list() || v.is_string() || v.is_dict();
  if (name == "iterable") return v.is_list() || v.is_string() || v.is_dict();
  if (name == "callable") return v.is_callable();
  if (name == "lower") return v.is_string() && map_chars(v.as_string(), to_lower) == v.as_string();
  if (name == "upper") return v.is_string() && map_chars(v.as_string(), to_upper) == v.as_string();
  if (name == "odd" || name == "even") {
    const std::int64_t x = need_int(v, line, name.c_str());
    return name == "odd" ? (x % 2 != 0) : (x % 2 == 0);
  }
  if (name == "divisibleby") {
    const std::int64_t d = need_int(arg(a, 0, "num"), line, "divisibleby");
    return d != 0 && need_int(v, line, "divisibleby") % d == 0;
  }
  const Value other = arg(a, 0, "other");
  if (name == "equalto" || name == "eq" || name == "==") return v == other;
  if (name == "ne" || name == "!=") return !(v == other);
  if (name == "sameas") return v == other && v.type_name() == other.type_name();
  if (name == "in") return contains(other, v, line);
  if (name == "lt" || name == "gt" || name == "le" || name == "ge" || name == "lessthan" || name == "greaterthan") {
    if (!(v.is_number() || v.is_bool()) || !(other.is_number() || other.is_bool())) {
      template_error(line, "test '" + name + "' compares numbers");
    }
    const double x = v.as_float(), y = other.as_float();
    if (name == "lt" || name == "lessthan") return x < y;
    if (name == "gt" || name == "greaterthan") return x > y;
    return name == "le" ? x <= y : x >= y;
  }
  template_error(line, "unsupported test '" + name + "'");
}

void add_globals(Dict& globals) {
  globals.set("range", Function([](Args& a) -> Value {
                std::int64_t start = 0, stop = 0, step = 1;
                std::vector<std::int64_t> n;
                for (const Value& v : a.positional) n.push_back(v.is_int() ? v.as_int() : static_cast<std::int64_t>(v.as_float()));
                if (n.size() == 1) stop = n[0];
                if (n.size() >= 2) start = n[0], stop = n[1];
                if (n.size() == 3) step = n[2];
                if (step == 0) fail("chat template: range() step must not be zero");
                List out;
                for (std::int64_t i = start; step > 0 ? i < stop : i > stop; i += step) {
                  out.emplace_back(i);
                  if (out.size() > 1000000) fail("chat template: range() too large");
                }
                return out;
              }));
  auto make_dict = [](bool ns) {
    return Function([ns](Args& a) -> Value {
      auto d = std::make_shared<Dict>();
      d->is_namespace = ns;
      for (const Value& p : a.positional)
        if (p.is_dict())
          for (const auto& [k, v] : p.as_dict().items) d->set(k, v);
      for (auto& [k, v] : a.keyword) d->set(k, v);
      return d;
    });
  };
  globals.set("namespace", make_dict(true));
  globals.set("dict", make_dict(false));
  globals.set("raise_exception", Function([](Args& a) -> Value {
                fail("chat template raised an exception: ", a.positional.empty() ? std::string() : a.positional[0].str());
              }));
  globals.set("strftime_now", Function([](Args& a) -> Value {
                const std::time_t now = std::time(nullptr);
                std::tm tm{};
                localtime_r(&now, &tm);
                char buf[256];
                const std::string fmt = a.positional.empty() ? std::string() : a.positional[0].str();
                const std::size_t n = std::strftime(buf, sizeof buf, fmt.c_str(), &tm);
                return std::string(buf, n);
              }));
}

}  // namespace fp4serve::tokenizer::jinja
