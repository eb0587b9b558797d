#pragma once
// A paged copy of contiguous keys and values, laid out the way the engine's state pool lays out
// a sequence (engine/state_pool.h, model/causal_lm.h): per block, every layer's K then V rows,
// in the cache's element type (kernels/kv_cache.h). Validation and tests run attention kernels
// on it with the blocks in a shuffled order and this layer's rows between other layers' (filled
// with NaN), so a kernel that ignores block boundaries or the layer offsets reads the wrong
// numbers and fails.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/kernels.h"

namespace fp4serve::kernels {

class PagedKvCopy {
 public:
  // k, v: [tokens, kv_heads * head_dim] contiguous fp32, stored rounded to `dtype` in the block
  // layout of kernels.h. `layers` layers per block, this copy's rows at `layer`.
  PagedKvCopy(const float* k, const float* v, std::int64_t tokens, std::int64_t kv_heads, std::int64_t head_dim,
              std::int64_t block_tokens, std::int64_t layers = 3, std::int64_t layer = 1, std::uint64_t seed = 1,
              DType dtype = DType::F32);
  PagedKvCopy(const PagedKvCopy&) = delete;
  PagedKvCopy& operator=(const PagedKvCopy&) = delete;
  PagedKvCopy(PagedKvCopy&&) = default;
  PagedKvCopy& operator=(PagedKvCopy&&) = default;

  // Sets kv_blocks, kv_dtype, block_tokens, k_offset and v_offset of `args`.
  void point(AttentionArgs& args) const;

 private:
  DType dtype_ = DType::F32;
  std::int64_t block_tokens_ = 0;
  std::int64_t k_offset_ = 0, v_offset_ = 0;
  std::vector<std::byte> storage_;
  std::vector<const std::byte*> blocks_;
};

}  // namespace fp4serve::kernels
