#pragma once
// Rotary position embedding as transformers computes it (modeling_rope_utils.py and the
// model's RotaryEmbedding / apply_rotary_pos_emb): neox-style halves (dimension i pairs with
// i + rotary_dim/2), inv_freq and cos/sin in fp32 with the same operation order, and the rope
// types a qwen3 / qwen3_moe config can carry: default (none), linear and yarn.
#include <cstdint>
#include <vector>

#include "formats/model_config.h"

namespace fp4serve {

class RotaryEmbedding {
 public:
  explicit RotaryEmbedding(const ModelConfig& config);

  std::int64_t rotary_dim() const { return rotary_dim_; }
  const std::vector<float>& inv_freq() const { return inv_freq_; }
  // Multiplies cos and sin: 1 except for yarn (its "attention_factor", 0.1 ln(factor) + 1).
  float attention_scaling() const { return attention_scaling_; }

  // cos[j] and sin[j] for j in [0, rotary_dim/2) at `position` (both halves of HF's
  // cat((freqs, freqs)) are equal, so half is stored).
  void cos_sin(std::int64_t position, float* cos, float* sin) const;

  // Rotates the first rotary_dim dimensions of each of `num_heads` heads of `head_dim` floats at
  // x, in place: x*cos + rotate_half(x)*sin, with cos/sin from cos_sin().
  void apply(float* x, std::int64_t num_heads, std::int64_t head_dim, const float* cos, const float* sin) const;

 private:
  std::int64_t rotary_dim_ = 0;
  std::vector<float> inv_freq_;
  float attention_scaling_ = 1.0f;
};

}  // namespace fp4serve
