#pragma once
// One sequence's KV state for model tests that drive CausalLM::forward directly: blocks of
// `block_tokens` positions, each its own allocation, handed to the model in a shuffled order of
// memory (so a wrong block index or layer offset reads another block's numbers), poisoned with
// NaN so a row read before it was written shows up. block_tokens = 0 is one contiguous block.
// The elements are of the model's kv_cache_dtype().
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <random>
#include <span>
#include <vector>

#include "kernels/kv_cache.h"
#include "model/causal_lm.h"

namespace fp4serve::test_kv {

class SequenceKv {
 public:
  SequenceKv(const CausalLM& model, std::int64_t capacity, std::int64_t block_tokens = 0, std::uint64_t seed = 1)
      : spec_(model.state_spec()), head_dim_(model.config().head_dim), block_tokens_(block_tokens > 0 ? block_tokens : capacity) {
    const std::int64_t blocks = (capacity + block_tokens_ - 1) / block_tokens_;
    storage_.resize(static_cast<std::size_t>(blocks));
    const std::vector<float> nans(static_cast<std::size_t>(spec_.kv_block_elements(block_tokens_)), NAN);
    for (auto& b : storage_) {
      b.resize(static_cast<std::size_t>(spec_.kv_block_bytes(block_tokens_)));
      kernels::store_kv_row(b.data(), spec_.kv_dtype, nans.data(), spec_.kv_block_elements(block_tokens_));
    }
    std::vector<std::size_t> order(storage_.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937_64(seed));
    for (std::size_t i : order) blocks_.push_back(storage_[i].data());
    state.kv_blocks = blocks_;
    state.kv_dtype = spec_.kv_dtype;
    state.block_tokens = block_tokens_;
  }
  SequenceKv(const SequenceKv&) = delete;
  SequenceKv& operator=(const SequenceKv&) = delete;

  // Runs `tokens` after state.past and advances it.
  void forward(const CausalLM& model, std::span<const std::int32_t> tokens, std::span<float> logits,
               LogitsFor which = LogitsFor::AllPositions) {
    const SequenceChunk chunk{tokens, &state, which};
    model.forward({&chunk, 1}, logits);
    state.past += static_cast<std::int64_t>(tokens.size());
  }

  // Element j of layer l's key (or value) row at position p (all KV heads, head by head), widened
  // to fp32.
  float key(std::int64_t l, std::int64_t p, std::int64_t j) const { return element(2 * l, p, j); }
  float value(std::int64_t l, std::int64_t p, std::int64_t j) const { return element(2 * l + 1, p, j); }
  std::int64_t row_elements() const { return spec_.kv_row_elements; }

  SequenceState state;

 private:
  // The block layout of kernels/kernels.h, read through kv_cache.h's accessor.
  float element(std::int64_t slab, std::int64_t p, std::int64_t j) const {
    const kernels::KvBlockSide side{slab * block_tokens_ * spec_.kv_row_elements, block_tokens_, spec_.kv_row_elements / head_dim_,
                                    head_dim_};
    return kernels::load_kv_token_element(blocks_[static_cast<std::size_t>(p / block_tokens_)], spec_.kv_dtype, side,
                                          p % block_tokens_, j);
  }
  StateSpec spec_;
  std::int64_t head_dim_;
  std::int64_t block_tokens_;
  std::vector<std::vector<std::byte>> storage_;
  std::vector<std::byte*> blocks_;
};

}  // namespace fp4serve::test_kv
