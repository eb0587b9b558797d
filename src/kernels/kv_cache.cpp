#include "kernels/kv_cache.h"

#include <cstring>

#include "numerics/scalar_formats.h"
#include "util/error.h"

namespace fp4serve::kernels {

bool kv_dtype_supported(DType dtype) { return dtype == DType::F32 || dtype == DType::F16 || dtype == DType::BF16; }

std::size_t kv_element_bytes(DType dtype) {
  if (!kv_dtype_supported(dtype)) fail("KV cache: element type ", dtype_name(dtype), " is not supported (f32, f16, bf16)");
  return dtype == DType::F32 ? 4 : 2;
}

std::optional<DType> kv_dtype_from_name(std::string_view name) {
  if (name == "f32" || name == "float32") return DType::F32;
  if (name == "f16" || name == "float16") return DType::F16;
  if (name == "bf16" || name == "bfloat16") return DType::BF16;
  return std::nullopt;
}

std::string_view kv_dtype_name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::F16: return "f16";
    case DType::BF16: return "bf16";
    default: return dtype_name(dtype);
  }
}

void store_kv_row(std::byte* dst, DType dtype, const float* src, std::int64_t n) {
  const auto count = static_cast<std::size_t>(n);
  switch (dtype) {
    case DType::F32: std::memcpy(dst, src, count * sizeof(float)); return;
    case DType::F16:
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint16_t h = float_to_fp16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    case DType::BF16:
      for (std::size_t i = 0; i < count; ++i) {
        const std::uint16_t h = float_to_bf16(src[i]);
        std::memcpy(dst + 2 * i, &h, 2);
      }
      return;
    default: fail("KV cache: element type ", dtype_name(dtype), " is not supported (f32, f16, bf16)");
  }
}

std::int64_t kv_head_row_element(const KvBlockSide& side, std::int64_t g, std::int64_t slot) {
  return side.side_offset + (g * side.block_tokens + slot) * side.head_dim;
}

void store_kv_token(std::byte* block, DType dtype, const KvBlockSide& side, std::int64_t slot, const float* src) {
  const auto bytes = static_cast<std::int64_t>(kv_element_bytes(dtype));
  for (std::int64_t g = 0; g < side.kv_heads; ++g)
    store_kv_row(block + kv_head_row_element(side, g, slot) * bytes, dtype, src + g * side.head_dim, side.head_dim);
}

float load_kv_token_element(const std::byte* block, DType dtype, const KvBlockSide& side, std::int64_t slot, std::int64_t j) {
  const auto bytes = static_cast<std::int64_t>(kv_element_bytes(dtype));
  return load_kv_element(block + kv_head_row_element(side, j / side.head_dim, slot) * bytes, dtype, j % side.head_dim);
}

float load_kv_element(const std::byte* row, DType dtype, std::int64_t i) {
  if (dtype == DType::F32) {
    float v;
    std::memcpy(&v, row + 4 * i, 4);
    return v;
  }
  std::uint16_t h;
  std::memcpy(&h, row + 2 * i, 2);
  return dtype == DType::F16 ? fp16_to_float(h) : bf16_to_float(h);
}

}  // namespace fp4serve::kernels
