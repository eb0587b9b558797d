#pragma once
// Element types a safetensors file can hold, with the names the format spells them with.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fp4serve {

enum class DType { F64, F32, F16, BF16, F8_E4M3, F8_E5M2, I64, I32, I16, I8, U8, BOOL };

// "BF16" -> DType::BF16; nullopt for a name the format does not define.
std::optional<DType> dtype_from_name(std::string_view name);
std::string_view dtype_name(DType dtype);
std::size_t dtype_size(DType dtype);
bool dtype_is_float(DType dtype);

// "[768, 2048]", as error messages print shapes.
std::string shape_to_string(const std::vector<std::int64_t>& shape);

// Largest tensor (in bytes) a shape may describe. Keeping numel() * element size, and every partial
// product of the dimensions, below 2^63 means no caller computing sizes from a shape can overflow.
inline constexpr std::uint64_t kMaxTensorBytes = static_cast<std::uint64_t>(INT64_MAX);

// Bytes a tensor of `shape` occupies: numel * dtype_size. nullopt when a dimension is negative or
// when the product of the non-zero dimensions times the element size exceeds kMaxTensorBytes
// (checked even when another dimension is zero).
std::optional<std::uint64_t> shape_nbytes(DType dtype, std::span<const std::int64_t> shape);

}  // namespace fp4serve
