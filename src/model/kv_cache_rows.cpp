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

void store_new_kv(const SequenceState& st, std::int64_t layer, std::int64_t row, std::int64_t m, const float* k,
                  const float* v) {
  const std::int64_t B = st.block_tokens, k_offset = key_offset(st, layer, row), v_offset = k_offset + B * row;
  const auto bytes = static_cast<std::int64_t>(kernels::kv_element_bytes(st.kv_dtype));
  for (std::int64_t t = 0; t < m; ++t) {
    const std::int64_t p = st.past + t, slot = (p % B) * row;
    std::byte* block = st.kv_blocks[static_cast<std::size_t>(p / B)];
    kernels::store_kv_row(block + (k_offset + slot) * bytes, st.kv_dtype, k + t * row, row);
    kernels::store_kv_row(block + (v_offset + slot) * bytes, st.kv_dtype, v + t * row, row);
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
