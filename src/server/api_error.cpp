#include "server/api_error.h"

namespace fp4serve::server {

ApiError::ApiError(int status, const std::string& message, std::string type, std::string param, std::string code)
    : std::runtime_error(message), status_(status), type_(std::move(type)), param_(std::move(param)),
      code_(std::move(code)) {}

nlohmann::ordered_json ApiError::to_json() const {
  nlohmann::ordered_json e;
  e["message"] = what();
  e["type"] = type_;
  e["param"] = param_.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(param_);
  e["code"] = code_.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(code_);
  return {{"error", e}};
}

void invalid_param(const std::string& param, const std::string& message, const std::string& code) {
  throw ApiError(400, message, "invalid_request_error", param, code);
}

}  // namespace fp4serve::server
