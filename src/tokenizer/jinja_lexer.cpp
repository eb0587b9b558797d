#include "tokenizer/jinja_lexer.h"

#include <cctype>

#include "tokenizer/utf8.h"
#include "util/error.h"

namespace fp4serve::tokenizer::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

class Lexer {
 public:
  explicit Lexer(std::string source) : src_(std::move(source)) {}

  std::vector<Token> run() {
    bool strip_next = false;    // the previous tag ended with "-": drop leading whitespace
    bool line_starting = true;  // the next text begins at the start of a line
    while (pos_ < src_.size()) {
      const std::size_t tag = find_tag(pos_);
      std::string text = src_.substr(pos_, tag - pos_);
      const int text_line = line_;
      advance_to(tag);
      if (strip_next) {
        std::size_t i = 0;
        while (i < text.size() && is_space(text[i])) ++i;
        text.erase(0, i);
      }
      strip_next = false;
      if (tag == src_.size()) {
        push_text(text, text_line);
        break;
      }
      const char kind = src_[tag + 1];  // '{', '%' or '#'
      const char sign = tag + 2 < src_.size() ? src_[tag + 2] : '\0';
      if (sign == '-') {
        while (!text.empty() && is_space(text.back())) text.pop_back();
      } else if (sign != '+' && kind != '{') {
        // lstrip_blocks: a block or comment alone on its line takes the indentation with it.
        const std::size_t nl = text.rfind('\n');
        const std::size_t line_begin = nl == std::string::npos ? 0 : nl + 1;
        if (line_begin > 0 || line_starting) {
          bool blank = true;
          for (std::size_t i = line_begin; i < text.size(); ++i) blank = blank && is_space(text[i]);
          if (blank) text.erase(line_begin);
        }
      }
      push_text(text, text_line);
      const std::size_t body = tag + 2 + ((sign == '-' || sign == '+') ? 1 : 0);
      advance_to(body);
      bool right_strip = false;
      if (kind == '#') {
        right_strip = comment();
      } else if (kind == '%' && raw_block()) {
        right_strip = last_raw_strip_;
      } else {
        right_strip = tag_tokens(kind == '{');
      }
      // trim_blocks: the newline right after a block or comment tag goes too.
      line_starting = false;
      if (right_strip) {
        strip_next = true;
      } else if (kind != '{' && pos_ < src_.size() && src_[pos_] == '\n') {
        advance_to(pos_ + 1);
        line_starting = true;
      }
    }
    tokens_.push_back({Token::Type::End, "", line_});
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void error(const std::string& what) const { fail("chat template, line ", line_, ": ", what); }

  std::size_t find_tag(std::size_t from) const {
    for (std::size_t i = from; i + 1 < src_.size(); ++i) {
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    }
    return src_.size();
  }

  void advance_to(std::size_t to) {
    for (; pos_ < to; ++pos_)
      if (src_[pos_] == '\n') ++line_;
  }

  void push_text(const std::string& text, int line) {
    if (!text.empty()) tokens_.push_back({Token::Type::Text, text, line});
  }

  // After "{#": skips to "#}"; returns whether it was "-#}".
  bool comment() {
    const std::size_t end = src_.find("#}", pos_);
    if (end == std::string::npos) error("unterminated comment");
    const bool strip = end > pos_ && src_[end - 1] == '-';
    advance_to(end + 2);
    return strip;
  }

  // After "{%": handles "{% raw %}...{% endraw %}" as literal text; false if this is not raw.
  bool raw_block() {
    std::size_t p = pos_;
    while (p < src_.size() && is_space(src_[p])) ++p;
    if (src_.compare(p, 3, "raw") != 0 || (p + 3 < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[p + 3])) || src_[p + 3] == '_'))) {
      return false;
    }
    p += 3;
    while (p < src_.size() && is_space(src_[p])) ++p;
    bool strip_inner = false;
    if (src_.compare(p, 1, "-") == 0) {
      strip_inner = true;
      ++p;
    }
    if (src_.compare(p, 2, "%}") != 0) error("expected %} after raw");
    p += 2;
    // Find "{% endraw %}" (with optional whitespace control).
    std::size_t search = p;
    while (true) {
      const std::size_t open = src_.find("{%", search);
      if (open == std::string::npos) error("missing {% endraw %}");
      std::size_t q = open + 2;
      const bool strip_before = q < src_.size() && src_[q] == '-';
      if (q < src_.size() && (src_[q] == '-' || src_[q] == '+')) ++q;
      while (q < src_.size() && is_space(src_[q])) ++q;
      if (src_.compare(q, 6, "endraw") == 0) {
        q += 6;
        while (q < src_.size() && is_space(src_[q])) ++q;
        last_raw_strip_ = src_.compare(q, 1, "-") == 0;
        if (last_raw_strip_) ++q;
        if (src_.compare(q, 2, "%}") != 0) error("expected %} after endraw");
        std::string text = src_.substr(p, open - p);
        if (strip_inner) {
          std::size_t i = 0;
          while (i < text.size() && is_space(text[i])) ++i;
          text.erase(0, i);
        }
        if (strip_before) {
          while (!text.empty() && is_space(text.back())) text.pop_back();
        }
        const int line = line_;
        advance_to(q + 2);
        push_text(text, line);
        return true;
      }
      search = open + 2;
    }
  }
  bool last_raw_strip_ = false;

  // Tokens of a {{ ... }} or {% ... %} tag up to its end marker; returns whether it was "-}}"/"-%}".
  bool tag_tokens(bool print) {
    tokens_.push_back({print ? Token::Type::PrintBegin : Token::Type::BlockBegin, "", line_});
    const char close = print ? '}' : '%';
    while (true) {
      while (pos_ < src_.size() && is_space(src_[pos_])) advance_to(pos_ + 1);
      if (pos_ >= src_.size()) error(print ? "unterminated {{" : "unterminated {%");
      const char c = src_[pos_];
      auto at = [&](const char* s) { return src_.compare(pos_, std::char_traits<char>::length(s), s) == 0; };
      const std::string end_marker = std::string(1, close) + "}";
      if (at(end_marker.c_str())) {
        tokens_.push_back({print ? Token::Type::PrintEnd : Token::Type::BlockEnd, "", line_});
        advance_to(pos_ + 2);
        return false;
      }
      if (c == '-' && src_.compare(pos_ + 1, 2, end_marker) == 0) {
        tokens_.push_back({print ? Token::Type::PrintEnd : Token::Type::BlockEnd, "", line_});
        advance_to(pos_ + 3);
        return true;
      }
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        std::size_t e = pos_;
        while (e < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
        tokens_.push_back({Token::Type::Name, src_.substr(pos_, e - pos_), line_});
        advance_to(e);
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        number();
      } else if (c == '\'' || c == '"') {
        string_literal(c);
      } else {
        static const char* const kOps[] = {"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<",
                                           ">",  "=",  ".",  ",",  ":",  "|",  "(", ")", "[", "]", "{", "}"};
        bool matched = false;
        for (const char* op : kOps) {
          if (at(op)) {
            tokens_.push_back({Token::Type::Operator, op, line_});
            advance_to(pos_ + std::char_traits<char>::length(op));
            matched = true;
            break;
          }
        }
        if (!matched) error(std::string("unexpected character '") + c + "' in tag");
      }
    }
  }

  void number() {
    std::size_t e = pos_;
    while (e < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[e])) || src_[e] == '_')) ++e;
    bool is_float = false;
    if (e + 1 < src_.size() && src_[e] == '.' && std::isdigit(static_cast<unsigned char>(src_[e + 1]))) {
      is_float = true;
      ++e;
      while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
    }
    if (e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      std::size_t f = e + 1;
      if (f < src_.size() && (src_[f] == '+' || src_[f] == '-')) ++f;
      if (f < src_.size() && std::isdigit(static_cast<unsigned char>(src_[f]))) {
        is_float = true;
        e = f;
        while (e < src_.size() && std::isdigit(static_cast<unsigned char>(src_[e]))) ++e;
      }
    }
    std::string text;
    for (std::size_t i = pos_; i < e; ++i)
      if (src_[i] != '_') text += src_[i];
    tokens_.push_back({is_float ? Token::Type::Float : Token::Type::Integer, text, line_});
    advance_to(e);
  }

  // A quoted literal with Python's escapes (Jinja decodes them with "unicode-escape").
  void string_literal(char quote) {
    std::string value;
    std::size_t i = pos_ + 1;
    const int line = line_;
    auto hex = [&](std::size_t digits) -> char32_t {
      if (i + digits >= src_.size()) error("truncated escape in string");
      char32_t cp = 0;
      for (std::size_t k = 1; k <= digits; ++k) {
        const char h = src_[i + k];
        if (!std::isxdigit(static_cast<unsigned char>(h))) error("bad escape in string");
        cp = cp * 16 + static_cast<char32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
      }
      i += digits;
      return cp;
    };
    while (true) {
      if (i >= src_.size()) error("unterminated string");
      const char c = src_[i];
      if (c == quote) break;
      if (c != '\\') {
        value += c;
        ++i;
        continue;
      }
      if (i + 1 >= src_.size()) error("unterminated string");
      const char n = src_[i + 1];
      ++i;  // now at the escape letter
      switch (n) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case 'a': value += '\a'; break;
        case '\\': value += '\\'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case '\n': break;  // line continuation
        case 'x': utf8::append(value, hex(2)); break;
        case 'u': utf8::append(value, hex(4)); break;
        case 'U': utf8::append(value, hex(8)); break;
        default:
          if (n >= '0' && n <= '7') {
            char32_t cp = 0;
            int k = 0;
            while (k < 3 && i < src_.size() && src_[i] >= '0' && src_[i] <= '7') cp = cp * 8 + static_cast<char32_t>(src_[i++] - '0'), ++k;
            --i;
            utf8::append(value, cp);
          } else {
            value += '\\';  // unknown escapes keep their backslash, as in Python
            value += n;
          }
      }
      ++i;
    }
    tokens_.push_back({Token::Type::String, value, line});
    advance_to(i + 1);
  }

  std::string src_;
  std::size_t pos_ = 0;
  int line_ = 1;
  std::vector<Token> tokens_;
};

// Jinja2 turns every \r\n and \r into \n and, without keep_trailing_newline, drops one final \n.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

std::vector<Token> lex(std::string_view source) { return Lexer(normalize_newlines(source)).run(); }

}  // namespace fp4serve::tokenizer::jinja
