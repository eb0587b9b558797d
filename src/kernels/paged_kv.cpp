#include "kernels/paged_kv.h"

#include <algorithm>
#include <limits>
#include <numeric>
#include <random>

#include "kernels/kv_cache.h"
#include "util/error.h"

namespace fp4serve::kernels {

PagedKvCopy::PagedKvCopy(const float* k, const float* v, std::int64_t tokens, std::int64_t kv_heads, std::int64_t head_dim,
                         std::int64_t block_tokens, std::int64_t layers, std::int64_t layer, std::uint64_t seed,
                         DType dtype)
    : dtype_(dtype), block_tokens_(block_tokens) {
  if (tokens < 0 || kv_heads <= 0 || head_dim <= 0 || block_tokens <= 0 || layers <= 0 || layer < 0 || layer >= layers)
    fail("PagedKvCopy: bad geometry (tokens ", tokens, ", kv_heads ", kv_heads, ", head_dim ", head_dim, ", block_tokens ",
         block_tokens, ", layer ", layer, " of ", layers, ")");
  const std::int64_t row = kv_heads * head_dim;
  const auto bytes = static_cast<std::int64_t>(kv_element_bytes(dtype));
  const std::int64_t nblocks = std::max<std::int64_t>(1, (tokens + block_tokens - 1) / block_tokens);
  const std::int64_t block_elements = layers * 2 * block_tokens * row;
  k_offset_ = 2 * layer * block_tokens * row;
  v_offset_ = (2 * layer + 1) * block_tokens * row;
  // Other layers' rows and unused tail rows hold NaN: reading them poisons the output.
  storage_.resize(static_cast<std::size_t>(nblocks * block_elements * bytes));
  const std::vector<float> nans(static_cast<std::size_t>(block_elements), std::numeric_limits<float>::quiet_NaN());
  for (std::int64_t b = 0; b < nblocks; ++b) store_kv_row(storage_.data() + b * block_elements * bytes, dtype, nans.data(), block_elements);
  std::vector<std::int64_t> slot(static_cast<std::size_t>(nblocks));
  std::iota(slot.begin(), slot.end(), 0);
  std::mt19937_64 rng(seed);
  std::shuffle(slot.begin(), slot.end(), rng);
  blocks_.resize(static_cast<std::size_t>(nblocks));
  for (std::int64_t b = 0; b < nblocks; ++b) {
    std::byte* base = storage_.data() + slot[static_cast<std::size_t>(b)] * block_elements * bytes;
    blocks_[static_cast<std::size_t>(b)] = base;
    const KvBlockSide keys{k_offset_, block_tokens, kv_heads, head_dim}, values{v_offset_, block_tokens, kv_heads, head_dim};
    for (std::int64_t t = b * block_tokens; t < std::min(tokens, (b + 1) * block_tokens); ++t) {
      store_kv_token(base, dtype, keys, t - b * block_tokens, k + t * row);
      store_kv_token(base, dtype, values, t - b * block_tokens, v + t * row);
    }
  }
}

void PagedKvCopy::point(AttentionArgs& args) const {
  args.kv_blocks = blocks_.data();
  args.kv_dtype = dtype_;
  args.block_tokens = block_tokens_;
  args.k_offset = k_offset_;
  args.v_offset = v_offset_;
}

}  // namespace fp4serve::kernels
