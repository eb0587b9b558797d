#include "model/kv_cache_rows.h"

#include <cstddef>

#include "kernels/kv_cache.h"

namespace fp4serve {

namespace {

// Elements from a block's start to attention layer l's keys (values follow B rows later).
std::int64_t key_offset(const SequenceState& st, std::int64_t layer, std::int64_t row) {
  return 2 * layer * st.block_tokens * row;
}

}  // namespace

void store_new_kv(const SequenceState& st, std::int64_t layer, std::int64_t row, std::int64_t head_dim, std::int64_t m,
                  const float* k, const float* v) {
  const std::int64_t B = st.block_tokens, k_offset = key_offset(st, layer, row);
  const kernels::KvBlockSide keys{k_offset, B, row / head_dim, head_dim}, values{k_offset + B * row, B, row / head_dim, head_dim};
  for (std::int64_t t = 0; t < m; ++t) {
    const std::int64_t p = st.past + t;
    std::byte* block = st.kv_blocks[static_cast<std::size_t>(p / B)];
    kernels::store_kv_token(block, st.kv_dtype, keys, p % B, k + t * row);
    kernels::store_kv_token(block, st.kv_dtype, values, p % B, v + t * row);
  }
}

void point_attention_at_kv(const SequenceState& st, std::int64_t layer, std::int64_t row, std::int64_t m,
                           kernels::AttentionArgs& args) {
  args.kv_blocks = st.kv_blocks.data();
  args.kv_dtype = st.kv_dtype;
  args.block_tokens = st.block_tokens;
  args.k_offset = key_offset(st, layer, row);
  args.v_offset = args.k_offset + st.block_tokens * row;
  args.m = m;
  args.past = st.past;
}

}  // namespace fp4serve
