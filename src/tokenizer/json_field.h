#pragma once
// Reading tokenizer.json with errors that name the file and the field, e.g.
// "tokenizer.json: pre_tokenizer.pretokenizers[0].pattern: expected an object with Regex or String".
#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

#include "util/error.h"

namespace fp4serve::tokenizer {

// A JSON value plus where it came from (file and dotted path), passed down the component factories.
class JsonField {
 public:
  JsonField(const nlohmann::json& value, std::string file, std::string path)
      : value_(&value), file_(std::move(file)), path_(std::move(path)) {}

  const nlohmann::json& value() const { return *value_; }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  bool is_null() const { return value_->is_null(); }

  // Where this field is, for error messages: "FILE: PATH".
  std::string where() const { return file_ + ": " + (path_.empty() ? "<root>" : path_); }

  template <class... Parts>
  [[noreturn]] void fail_here(const Parts&... parts) const {
    fail(where(), ": ", parts...);
  }

  bool has(std::string_view key) const { return value_->is_object() && value_->contains(key); }

  // The member `key`; missing members fail unless the caller checked has().
  JsonField operator[](std::string_view key) const {
    if (!value_->is_object()) fail_here("expected an object");
    const auto it = value_->find(key);
    if (it == value_->end()) fail(where(), ": missing field '", key, "'");
    return JsonField(*it, file_, path_.empty() ? std::string(key) : path_ + "." + std::string(key));
  }

  JsonField at(std::size_t index) const {
    return JsonField((*value_)[index], file_, path_ + "[" + std::to_string(index) + "]");
  }
  std::size_t array_size() const {
    if (!value_->is_array()) fail_here("expected an array");
    return value_->size();
  }

  std::string string() const {
    if (!value_->is_string()) fail_here("expected a string");
    return value_->get<std::string>();
  }
  bool boolean() const {
    if (!value_->is_boolean()) fail_here("expected true or false");
    return value_->get<bool>();
  }
  std::uint64_t unsigned_integer() const {
    if (!value_->is_number_unsigned()) fail_here("expected a non-negative integer");
    return value_->get<std::uint64_t>();
  }

  // Optional members with a default when absent or null.
  bool boolean_or(std::string_view key, bool fallback) const {
    return has(key) && !(*this)[key].is_null() ? (*this)[key].boolean() : fallback;
  }
  std::string string_or(std::string_view key, std::string fallback) const {
    return has(key) && !(*this)[key].is_null() ? (*this)[key].string() : fallback;
  }

  // The "type" tag every component object carries.
  std::string type() const { return (*this)["type"].string(); }

 private:
  const nlohmann::json* value_;
  std::string file_;
  std::string path_;
};

}  // namespace fp4serve::tokenizer
