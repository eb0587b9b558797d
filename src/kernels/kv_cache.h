#pragma once
// The element types a KV cache may hold (--kv-cache-dtype): F32 (the default: attention reads
// exactly what the model computed), F16 (llama.cpp's default cache type) or BF16 (vLLM's `auto`
// for these checkpoints), both half the bytes. Rows are written rounded to nearest even; every
// attention backend widens them to fp32 as it loads them. Also the one writer of a position's
// row into the block layout (store_kv_token).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "formats/dtype.h"

namespace fp4serve::kernels {

bool kv_dtype_supported(DType dtype);  // F32, F16, BF16
std::size_t kv_element_bytes(DType dtype);  // an Error for an unsupported type

// "f32" / "f16" / "bf16" (also "float32", "float16", "bfloat16", as vLLM spells them); nullopt otherwise.
std::optional<DType> kv_dtype_from_name(std::string_view name);
std::string_view kv_dtype_name(DType dtype);  // "f32", "f16", "bf16"

// Writes n floats to dst as `dtype` (no alignment needed).
void store_kv_row(std::byte* dst, DType dtype, const float* src, std::int64_t n);
// Element i of a row of `dtype`, widened to fp32.
float load_kv_element(const std::byte* row, DType dtype, std::int64_t i);

// Where one layer's keys (or values) lie in each cache block, the layout of kernels.h
// (AttentionArgs): KV head g's row at slot s (position p % block_tokens) starts at element
// side_offset + (g * block_tokens + s) * head_dim.
struct KvBlockSide {
  std::int64_t side_offset = 0;  // elements from the block's start to this layer's keys (or values)
  std::int64_t block_tokens = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
};
// Elements from a block's start to KV head g's row at `slot`: the layout's one formula.
std::int64_t kv_head_row_element(const KvBlockSide& side, std::int64_t g, std::int64_t slot);
// Writes one position's row (kv_heads * head_dim floats, head by head) to its slot of `block`.
void store_kv_token(std::byte* block, DType dtype, const KvBlockSide& side, std::int64_t slot, const float* src);
// Element j (head j / head_dim) of the row at `slot`, widened to fp32.
float load_kv_token_element(const std::byte* block, DType dtype, const KvBlockSide& side, std::int64_t slot, std::int64_t j);

}  // namespace fp4serve::kernels
