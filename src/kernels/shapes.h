#pragma once
// The shapes a model will run each op family on: what validation exercises and what a backend
// declares it supports. Derived from a ModelConfig + ResolvedQuantization (model_shapes.h).
#include <cstdint>
#include <string>
#include <vector>

#include "formats/dtype.h"
#include "formats/quant_scheme.h"
#include "kernels/kernels.h"

namespace fp4serve::kernels {

// One distinct Linear weight shape: y[m, n] = x[m, k] * W^T.
struct GemmShape {
  SchemeKind kind = SchemeKind::Dense;
  DType dtype = DType::BF16;  // storage dtype (U8 for NVFP4)
  std::int64_t n = 0;
  std::int64_t k = 0;
  std::int64_t model_n = 0;   // the model's N when validation caps a huge N (lm_head); else == n
  std::string example;        // one module with this shape, for reports
};

// One sparse MoE block shape.
struct MoeShape {
  std::int64_t hidden = 0;
  std::int64_t intermediate = 0;
  std::int64_t experts = 0;
  std::int64_t top_k = 0;
  bool norm_topk_prob = false;
  SchemeKind expert_kind = SchemeKind::NVFP4;
  DType expert_dtype = DType::U8;
  SchemeKind router_kind = SchemeKind::Dense;
  DType router_dtype = DType::BF16;
};

struct AttentionShape {
  std::int64_t heads = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  DType kv_dtype = DType::F32;  // the KV cache's element type (--kv-cache-dtype; kernels/kv_cache.h)
};

// The recurrent ops of a Gated DeltaNet layer: conv1d over conv_channels with conv_kernel taps,
// delta rule with value_heads heads of [key_dim, value_dim] state sharing key_heads q/k heads.
struct LinearAttentionShape {
  std::int64_t conv_channels = 0;
  std::int64_t conv_kernel = 0;
  std::int64_t key_heads = 0;
  std::int64_t value_heads = 0;
  std::int64_t key_dim = 0;
  std::int64_t value_dim = 0;
};

struct ShapeSet {
  std::string source;  // "model <dir>" or "built-in shapes"
  Fp4Semantics semantics = Fp4Semantics::W4A16;
  // Every NVFP4 weight the text model runs carries an activation (input) scale: the checkpoint
  // was calibrated for 4-bit activations (a ModelOpt or compressed-tensors W4A4 recipe), so
  // int8 activations are finer than what it was published for and `auto` may use them.
  bool fp4_activations_calibrated = false;
  std::vector<GemmShape> dense;  // Dense and FP8 weights (dense_gemm)
  std::vector<GemmShape> fp4;    // NVFP4 weights (fp4_gemm)
  std::vector<MoeShape> moe;
  std::vector<AttentionShape> attention;
  std::vector<LinearAttentionShape> linear_attention;
};

std::string describe(const GemmShape& s);       // "NVFP4 768x2048 (model.layers.0...)"
std::string describe(const MoeShape& s);
std::string describe(const AttentionShape& s);
std::string describe(const LinearAttentionShape& s);
std::string_view family_name(OpFamily family);  // "dense", "fp4-gemm", "moe", "attention"
std::string_view family_flag(OpFamily family);  // "--dense-backend", ...

}  // namespace fp4serve::kernels
