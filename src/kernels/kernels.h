#pragma once
// The op families the model calls, each behind a small interface. Backends (reference, avx2,
// avx512, amx, later cuda) implement them; the registry chooses one per family after validating
// it against the scalar reference on the model's real shapes. The model sees only a KernelSet.
#include <cstdint>
#include <vector>

#include "formats/dtype.h"
#include "formats/quant_scheme.h"

namespace fp4serve::kernels {

enum class OpFamily { DenseGemm, Fp4Gemm, Moe, Attention };

// A Linear's weight as stored in the checkpoint, [n = out_features, k = in_features], row-major.
struct WeightMatrix {
  SchemeKind kind = SchemeKind::Dense;
  DType dtype = DType::BF16;  // Dense: BF16, F16 or F32; FP8: F8_E4M3; NVFP4: U8 (two codes per byte)
  std::int64_t n = 0;
  std::int64_t k = 0;
  const std::uint8_t* data = nullptr;
  const std::uint8_t* block_scales = nullptr;  // NVFP4: E4M3 [n, k/16]
  float weight_scale_2 = 1.0f;                 // NVFP4 global scale; FP8 per-tensor scale
  float input_scale = 0.0f;                    // static activation scale for W4A4; 0 = absent
};

// How NVFP4 GEMMs treat activations: W4A16 keeps them in fp32 (the default, what weight-only
// servers compute); W4A4 fake-quantizes them to NVFP4 with input_scale, as Blackwell kernels do.
enum class Fp4Semantics { W4A16, W4A4 };

// y[m, n] = x[m, k] * W^T. x and y are fp32, row-major, dense.
class GemmKernel {
 public:
  virtual ~GemmKernel() = default;
  virtual void run(const float* x, std::int64_t m, const WeightMatrix& w, float* y, Fp4Semantics semantics) const = 0;
};

// One sparse MoE block (Qwen3-MoE): router softmax in fp32, top-k, optional renormalisation,
// SwiGLU experts, weighted sum. y[m, hidden] = MoE(x[m, hidden]).
struct MoeExpert {
  WeightMatrix gate, up, down;
};
struct MoeLayer {
  WeightMatrix router;  // [num_experts, hidden]
  std::vector<MoeExpert> experts;
  std::int64_t top_k = 0;
  bool norm_topk_prob = false;
};
class MoeKernel {
 public:
  virtual ~MoeKernel() = default;
  virtual void run(const float* x, std::int64_t m, const MoeLayer& layer, float* y, Fp4Semantics semantics) const = 0;
};

// Causal attention of m new query tokens of one sequence against its cache.
// q: [m, num_heads, head_dim]; k_cache/v_cache: [past + m, num_kv_heads, head_dim] (the new
// tokens' keys and values already appended); new token i sees cache positions [0, past + i].
// out: [m, num_heads, head_dim]. Softmax in fp32; GQA: q head h reads kv head h / (heads / kv_heads).
struct AttentionArgs {
  const float* q = nullptr;
  const float* k_cache = nullptr;
  const float* v_cache = nullptr;
  float* out = nullptr;
  std::int64_t m = 0;
  std::int64_t past = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t head_dim = 0;
  float scale = 1.0f;
};
class AttentionKernel {
 public:
  virtual ~AttentionKernel() = default;
  virtual void run(const AttentionArgs& args) const = 0;
};

// The kernels a model runs with, one per family, owned by the registry that chose them.
struct KernelSet {
  const GemmKernel* dense_gemm = nullptr;  // Dense and FP8 weights
  const GemmKernel* fp4_gemm = nullptr;    // NVFP4 weights
  const MoeKernel* moe = nullptr;
  const AttentionKernel* attention = nullptr;
};

// The scalar reference backends: the source of truth every other backend is validated against.
KernelSet reference_kernels();

}  // namespace fp4serve::kernels
