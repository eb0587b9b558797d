#include "formats/dtype.h"

#include <array>

namespace fp4serve {
namespace {

struct DTypeDesc {
  DType dtype;
  std::string_view name;
  std::size_t size;
  bool is_float;
};

// Indexed by the enum's value; the names are the ones safetensors headers spell.
constexpr std::array<DTypeDesc, 12> kDTypes{{
    {DType::F64, "F64", 8, true},
    {DType::F32, "F32", 4, true},
    {DType::F16, "F16", 2, true},
    {DType::BF16, "BF16", 2, true},
    {DType::F8_E4M3, "F8_E4M3", 1, true},
    {DType::F8_E5M2, "F8_E5M2", 1, true},
    {DType::I64, "I64", 8, false},
    {DType::I32, "I32", 4, false},
    {DType::I16, "I16", 2, false},
    {DType::I8, "I8", 1, false},
    {DType::U8, "U8", 1, false},
    {DType::BOOL, "BOOL", 1, false},
}};

constexpr bool table_matches_enum() {
  for (std::size_t i = 0; i < kDTypes.size(); ++i) {
    if (static_cast<std::size_t>(kDTypes[i].dtype) != i) return false;
  }
  return true;
}
static_assert(table_matches_enum(), "kDTypes must be ordered like enum class DType");

const DTypeDesc& desc(DType dtype) { return kDTypes.at(static_cast<std::size_t>(dtype)); }

}  // namespace

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const auto& d : kDTypes) {
    if (d.name == name) return d.dtype;
  }
  return std::nullopt;
}

std::string_view dtype_name(DType dtype) { return desc(dtype).name; }
std::size_t dtype_size(DType dtype) { return desc(dtype).size; }
bool dtype_is_float(DType dtype) { return desc(dtype).is_float; }

std::optional<std::uint64_t> shape_nbytes(DType dtype, std::span<const std::int64_t> shape) {
  const std::uint64_t elem = dtype_size(dtype);
  std::uint64_t nonzero_bytes = elem;  // product of the non-zero dims, times the element size
  bool has_zero = false;
  for (std::int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (dim == 0) {
      has_zero = true;
      continue;
    }
    const auto udim = static_cast<std::uint64_t>(dim);
    if (nonzero_bytes > kMaxTensorBytes / udim) return std::nullopt;
    nonzero_bytes *= udim;
  }
  return has_zero ? 0 : nonzero_bytes;
}

std::string shape_to_string(const std::vector<std::int64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace fp4serve
