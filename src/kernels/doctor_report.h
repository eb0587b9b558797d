#pragma once
// What `fp4serve doctor` reports: the build, the OS, the CPU and its feature flags, every backend
// compiled in with its verdict per op family (all validated, not just until one passes), and the
// backend chosen per family, on built-in shapes or on a model's. The JSON form is stable
// (schema "fp4serve.doctor/1", docs/kernels.md); the text form is for people.
#include <filesystem>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "kernels/registry.h"

namespace fp4serve::kernels {

struct DoctorOptions {
  std::optional<std::filesystem::path> model_dir;  // -m: validate on this checkpoint's shapes
  BackendOptions backends;                         // validate_all is forced on
};

// Never throws for a failed validation: the JSON then has "error" set (and "ok": false). Errors
// reading the model directory do throw Error.
nlohmann::json doctor_report(const DoctorOptions& options);
std::string doctor_text(const nlohmann::json& report);

}  // namespace fp4serve::kernels
