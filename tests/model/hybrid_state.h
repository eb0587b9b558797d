#pragma once
// Per-sequence state for CausalLM tests: paged KV blocks (deliberately small, so attention
// crosses block boundaries) and the linear-attention conv / recurrent states, all zero.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/causal_lm.h"

namespace fp4serve::hybrid_test {

struct SequenceBuffers {
  std::vector<std::vector<std::byte>> blocks;
  std::vector<std::vector<float>> conv, recurrent;
  std::vector<std::byte*> block_ptrs;
  std::vector<float*> conv_ptrs, recurrent_ptrs;
  SequenceState state;

  SequenceBuffers(const StateSpec& spec, std::int64_t capacity, std::int64_t block_tokens = 16) {
    const std::int64_t n_blocks = (capacity + block_tokens - 1) / block_tokens;
    for (std::int64_t b = 0; b < n_blocks; ++b)
      blocks.emplace_back(static_cast<std::size_t>(spec.kv_block_bytes(block_tokens)), std::byte{0});
    for (std::int64_t l = 0; l < spec.linear_layers; ++l) {
      conv.emplace_back(static_cast<std::size_t>(spec.conv_state_floats), 0.0f);
      recurrent.emplace_back(static_cast<std::size_t>(spec.recurrent_state_floats), 0.0f);
    }
    for (auto& b : blocks) block_ptrs.push_back(b.data());
    for (auto& c : conv) conv_ptrs.push_back(c.data());
    for (auto& r : recurrent) recurrent_ptrs.push_back(r.data());
    state.kv_blocks = block_ptrs;
    state.kv_dtype = spec.kv_dtype;
    state.block_tokens = block_tokens;
    state.conv_state = conv_ptrs;
    state.recurrent_state = recurrent_ptrs;
  }
  SequenceBuffers(const SequenceBuffers&) = delete;
  SequenceBuffers& operator=(const SequenceBuffers&) = delete;
};

}  // namespace fp4serve::hybrid_test
