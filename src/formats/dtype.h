#pragma once
// Element types a safetensors file can hold, with the names the format spells them with.
#include <cstddef>
#include <optional>
#include <string_view>

namespace fp4serve {

enum class DType { F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U8, BOOL };

// "BF16" -> DType::BF16; nullopt for a name the format does not define.
std::optional<DType> dtype_from_name(std::string_view name);
std::string_view dtype_name(DType dtype);
std::size_t dtype_size(DType dtype);
bool dtype_is_float(DType dtype);

}  // namespace fp4serve
