#include "tokenizer/json_reader.h"

#include "util/error.h"

namespace fp4serve::tokenizer {
namespace {

using json = nlohmann::json;

// Builds the tree like nlohmann's own DOM parser, except for the two big members.
class Reader final : public nlohmann::json_sax<json> {
 public:
  explicit Reader(TokenizerJson& out) : out_(out) {}

  bool null() override { return value(nullptr); }
  bool boolean(bool v) override { return value(v); }
  bool number_integer(number_integer_t v) override { return value(v); }
  bool number_unsigned(number_unsigned_t v) override { return value(v); }
  bool number_float(number_float_t v, const string_t&) override { return value(v); }
  bool binary(binary_t& v) override { return value(json::binary(v)); }

  bool string(string_t& v) override {
    if (mode_ == Mode::Merges && depth_ == 0) {
      out_.merges->push_back({MergeEntry::Form::Line, std::move(v), {}});
      return true;
    }
    if (mode_ == Mode::Merges && depth_ == 1) {
      MergeEntry& m = out_.merges->back();
      if (pair_items_ == 0) m.left = std::move(v);
      if (pair_items_ == 1) m.right = std::move(v);
      ++pair_items_;
      return true;
    }
    return value(std::move(v));
  }

  bool key(string_t& k) override {
    key_ = std::move(k);
    return true;
  }

  bool start_object(std::size_t) override {
    if (mode_ != Mode::Dom) return nested_in_capture();
    if (at_model_member("vocab")) {
      out_.vocab.emplace();
      add(json::object());  // placeholder, so model.vocab still "exists"
      mode_ = Mode::Vocab;
      depth_ = 0;
      return true;
    }
    push(add(json::object()));
    return true;
  }

  bool end_object() override {
    if (mode_ == Mode::Vocab && depth_ == 0) {
      mode_ = Mode::Dom;
      return true;
    }
    if (mode_ != Mode::Dom) return leave_nested();
    pop();
    return true;
  }

  bool start_array(std::size_t) override {
    if (mode_ == Mode::Merges && depth_ == 0) {
      out_.merges->push_back({MergeEntry::Form::Pair, {}, {}});
      pair_items_ = 0;
      depth_ = 1;
      return true;
    }
    if (mode_ != Mode::Dom) return nested_in_capture();
    if (at_model_member("merges")) {
      out_.merges.emplace();
      add(json::array());
      mode_ = Mode::Merges;
      depth_ = 0;
      return true;
    }
    push(add(json::array()));
    return true;
  }

  bool end_array() override {
    if (mode_ == Mode::Merges && depth_ == 0) {
      mode_ = Mode::Dom;
      return true;
    }
    if (mode_ == Mode::Merges && depth_ == 1) {
      if (pair_items_ != 2) out_.merges->back().form = MergeEntry::Form::Invalid;
      depth_ = 0;
      return true;
    }
    if (mode_ != Mode::Dom) return leave_nested();
    pop();
    return true;
  }

  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception& e) override {
    error_ = e.what();
    return false;
  }

  const std::string& error() const { return error_; }

 private:
  enum class Mode { Dom, Vocab, Merges };

  // A scalar: a DOM value, a vocabulary id, or a malformed merge entry.
  template <class T>
  bool value(T&& v) {
    if (mode_ == Mode::Vocab) {
      if constexpr (std::is_same_v<std::decay_t<T>, number_unsigned_t>) {
        if (depth_ == 0 && v <= UINT32_MAX) {
          out_.vocab->push_back({std::move(key_), static_cast<std::uint32_t>(v)});
          return true;
        }
      }
      if (!out_.vocab_error) out_.vocab_error = "token '" + key_ + "' has an id that is not a 32-bit unsigned integer";
      return true;
    }
    if (mode_ == Mode::Merges) {
      if (depth_ == 0) out_.merges->push_back({});  // neither "a b" nor a pair
      else if (depth_ == 1) ++pair_items_, out_.merges->back().form = MergeEntry::Form::Invalid;
      return true;
    }
    add(json(std::forward<T>(v)));
    return true;
  }

  // Objects or arrays nested where vocab ids or merge tokens belong: remember the entry is bad.
  bool nested_in_capture() {
    if (mode_ == Mode::Vocab && !out_.vocab_error) {
      out_.vocab_error = "token '" + key_ + "' has an id that is not a 32-bit unsigned integer";
    }
    if (mode_ == Mode::Merges) {
      if (depth_ == 0) out_.merges->push_back({});
      else out_.merges->back().form = MergeEntry::Form::Invalid;
    }
    ++depth_;
    return true;
  }
  bool leave_nested() {
    --depth_;
    return true;
  }

  // True when the next value is member `name` of the top-level "model" object.
  bool at_model_member(const char* name) const {
    return stack_.size() == 2 && stack_keys_[1] == "model" && stack_[1]->is_object() && key_ == name;
  }

  json* add(json&& v) {
    if (stack_.empty()) {
      out_.doc = std::move(v);
      return &out_.doc;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    json& slot = top[key_];
    slot = std::move(v);
    return &slot;
  }
  void push(json* container) {
    stack_keys_.push_back(stack_.empty() || stack_.back()->is_array() ? std::string() : key_);
    stack_.push_back(container);
  }
  void pop() {
    stack_.pop_back();
    stack_keys_.pop_back();
  }

  TokenizerJson& out_;
  std::vector<json*> stack_;
  std::vector<std::string> stack_keys_;  // key under which each open container sits
  std::string key_;
  Mode mode_ = Mode::Dom;
  int depth_ = 0;       // nesting inside the captured member
  int pair_items_ = 0;  // strings seen in the current ["a", "b"] merge
  std::string error_;
};

}  // namespace

TokenizerJson read_tokenizer_json(std::string_view text, const std::string& source) {
  TokenizerJson out;
  Reader reader(out);
  if (!json::sax_parse(text.begin(), text.end(), &reader)) fail(source, ": not valid JSON: ", reader.error());
  return out;
}

}  // namespace fp4serve::tokenizer
