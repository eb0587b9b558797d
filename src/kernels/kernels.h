#pragma once
// The op families the model calls, each behind a small interface. Backends (reference, avx2,
// avx512, amx, later cuda) implement them; the registry chooses one per family after validating
// it against the scalar reference on the model's real shapes. The model sees only a KernelSet.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "formats/dtype.h"
#include "formats/quant_scheme.h"

namespace fp4serve::kernels {

// LinearAttention covers the two recurrent ops of Gated DeltaNet layers (conv1d, delta rule).
enum class OpFamily { DenseGemm, Fp4Gemm, Moe, Attention, LinearAttention };

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

// Causal attention of m new query tokens of one sequence against its (paged) cache.
// q: [m, num_heads, head_dim]; out: [m, num_heads, head_dim]. The keys and values of positions
// [0, past + m) (the new tokens' already written) live in blocks of block_tokens positions,
// KV head by KV head: position p's key row for KV head g (head_dim elements of kv_dtype: F32, or
// F16 / BF16 to halve the cache, kernels/kv_cache.h) starts at element
// k_offset + (g * block_tokens + p % block_tokens) * head_dim of block kv_blocks[p / block_tokens],
// its value row the same from v_offset. So each KV head's rows in a block are one contiguous run:
// a decode task reading one head streams block_tokens * head_dim elements, where rows of all heads
// by position had given it one head_dim piece of every num_kv_heads (the decode attention over
// 8192 fp32 positions faster in 6 of 7 alternated rounds, by 7-21 %, docs/perf.md, session 35).
// store_kv_token (kv_cache.h) writes this layout.
// A contiguous cache is one block (block_tokens >= past + m). New token i sees positions
// [0, past + i]. Softmax and sums in fp32; GQA: q head h reads kv head h / (heads / kv_heads).
struct AttentionArgs {
  const float* q = nullptr;
  float* out = nullptr;
  const std::byte* const* kv_blocks = nullptr;
  DType kv_dtype = DType::F32;
  std::int64_t block_tokens = 0;
  std::int64_t k_offset = 0;  // elements from a block's start to this layer's first key row
  std::int64_t v_offset = 0;  // elements from a block's start to this layer's first value row
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

// Gated DeltaNet (Qwen3-Next / Qwen3.5 linear attention) runs two recurrent ops per sequence.
//
// Causal depthwise conv1d + SiLU over m new steps of one sequence with a carried state:
// out[t, c] = silu(sum_j weight[j, c] * x'[t + j, c]) where x' is the state's K-1 earlier inputs
// followed by x. The state ([K-1, channels], oldest row first, zero for a new sequence) is then
// replaced by the last K-1 rows of x'. x and out may not alias.
struct Conv1dArgs {
  const float* x = nullptr;       // [m, channels]
  float* out = nullptr;           // [m, channels]
  float* state = nullptr;         // [kernel - 1, channels], read and updated
  const float* weight = nullptr;  // [kernel, channels]: tap j of every channel (checkpoint [C, 1, K] transposed)
  std::int64_t m = 0;
  std::int64_t channels = 0;
  std::int64_t kernel = 0;
};
class Conv1dKernel {
 public:
  virtual ~Conv1dKernel() = default;
  virtual void run(const Conv1dArgs& args) const = 0;
};

// The gated delta rule over m new steps of one sequence, per value head h with state
// S_h [dk, dv] (zero for a new sequence) and its query/key head h / (num_v_heads / num_k_heads):
//   S = exp(g_t) S;  S += k_t (beta_t (v_t - S^T k_t))^T;  out_t = S^T q_t.
// q and k arrive l2-normalised and q already scaled by dk^-0.5 (the model does both, as
// transformers' use_qk_l2norm_in_kernel). A backend may use the chunked (UT-transform) form
// for long m; it must equal the recurrence to fp32 rounding.
struct DeltaRuleArgs {
  const float* q = nullptr;     // [m, num_k_heads, dk]
  const float* k = nullptr;     // [m, num_k_heads, dk]
  const float* v = nullptr;     // [m, num_v_heads, dv]
  const float* g = nullptr;     // [m, num_v_heads] log decay (<= 0)
  const float* beta = nullptr;  // [m, num_v_heads]
  float* state = nullptr;       // [num_v_heads, dk, dv], read and updated
  float* out = nullptr;         // [m, num_v_heads, dv]
  std::int64_t m = 0;
  std::int64_t num_k_heads = 0;
  std::int64_t num_v_heads = 0;
  std::int64_t dk = 0;
  std::int64_t dv = 0;
};
class DeltaRuleKernel {
 public:
  virtual ~DeltaRuleKernel() = default;
  virtual void run(const DeltaRuleArgs& args) const = 0;
};

// The kernels a model runs with, one per family, owned by the registry that chose them.
struct KernelSet {
  const GemmKernel* dense_gemm = nullptr;  // Dense and FP8 weights
  const GemmKernel* fp4_gemm = nullptr;    // NVFP4 weights
  const MoeKernel* moe = nullptr;
  const AttentionKernel* attention = nullptr;
  const Conv1dKernel* conv1d = nullptr;        // linear-attention models only
  const DeltaRuleKernel* delta_rule = nullptr;  // linear-attention models only
};

// The reference linear-attention ops: fp64 accumulation, the recurrence step by step.
const Conv1dKernel* reference_conv1d();
const DeltaRuleKernel* reference_delta_rule();
// The chunked form (transformers' torch_chunk_gated_delta_rule, UT transform by forward
// substitution) in fp64, `chunk` steps at a time; equal to the recurrence up to rounding.
void chunked_delta_rule_reference(const DeltaRuleArgs& args, std::int64_t chunk);

// The scalar reference backends: the source of truth every other backend is validated against.
KernelSet reference_kernels();

}  // namespace fp4serve::kernels
