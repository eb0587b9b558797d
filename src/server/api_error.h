#pragma once
// The error every endpoint answers with, in OpenAI's shape and with its HTTP status:
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": null}}
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace fp4serve::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string type = "invalid_request_error",
           std::string param = "", std::string code = "");
  int status() const { return status_; }
  const std::string& type() const { return type_; }
  const std::string& param() const { return param_; }
  const std::string& code() const { return code_; }
  nlohmann::ordered_json to_json() const;  // empty param/code become null

 private:
  int status_;
  std::string type_, param_, code_;
};

// 400 invalid_request_error naming the parameter at fault.
[[noreturn]] void invalid_param(const std::string& param, const std::string& message, const std::string& code = "");

}  // namespace fp4serve::server
