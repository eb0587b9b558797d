#pragma once
// Where attention layers meet a sequence's paged KV cache (the layout of model/causal_lm.h):
// the new positions' keys and values go in, rounded to the cache's element type, and the
// attention kernel is pointed at the layer's rows. Shared by every model with full attention.
#include <cstdint>

#include "kernels/kernels.h"
#include "model/causal_lm.h"

namespace fp4serve {

// Writes m positions after st.past of attention layer `layer`: row t of k and of v (`row` fp32
// elements each, KV heads of head_dim) to position st.past + t.
void store_new_kv(const SequenceState& st, std::int64_t layer, std::int64_t row, std::int64_t head_dim, std::int64_t m,
                  const float* k, const float* v);

// Sets args' cache fields for layer `layer` and the m new tokens after st.past.
void point_attention_at_kv(const SequenceState& st, std::int64_t layer, std::int64_t row, std::int64_t m,
                           kernels::AttentionArgs& args);

}  // namespace fp4serve
