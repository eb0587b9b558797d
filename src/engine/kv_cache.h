#pragma once
// The keys and values of one sequence, per layer, in fp32: [capacity, kv_heads, head_dim] each.
// Grows as tokens arrive (doubling, so appending is amortised O(1)); can be cut back to a prefix,
// which is how a chat keeps its conversation and re-uses the cached part of a re-rendered prompt.
#include <cstdint>
#include <vector>

#include "model/qwen3_model.h"

namespace fp4serve::engine {

class KvCache {
 public:
  explicit KvCache(const Qwen3Model& model, std::int64_t initial_capacity = 256);

  std::int64_t length() const { return length_; }
  std::int64_t capacity() const { return capacity_; }
  // Makes room for `extra` more tokens after length().
  void reserve_more(std::int64_t extra);
  // The view a forward call over the next tokens uses (past = length()).
  KvView view();
  // Records that `n` tokens were written after length() by a forward call.
  void advance(std::int64_t n);
  // Forgets everything after the first `n` tokens.
  void truncate(std::int64_t n);
  std::uint64_t bytes() const;

 private:
  std::int64_t layers_ = 0;
  std::int64_t row_floats_ = 0;
  std::int64_t capacity_ = 0;
  std::int64_t length_ = 0;
  std::vector<std::vector<float>> keys_, values_;
};

}  // namespace fp4serve::engine
