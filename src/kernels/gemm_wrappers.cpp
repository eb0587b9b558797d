#include "kernels/gemm_wrappers.h"

#include <cstring>

#include "kernels/kv_cache.h"
#include "kernels/scratch.h"
#include "kernels/weight_rows.h"
#include "numerics/nvfp4.h"
#include "util/error.h"

namespace fp4serve::kernels {

void check_gemm_args(const WeightMatrix& w, std::int64_t m, bool nvfp4_family, const std::string& backend) {
  const char* family = nvfp4_family ? "fp4-gemm" : "dense GEMM";
  if (m < 0) fail(backend, " ", family, ": m = ", m, " is negative");
  if (w.n < 0 || w.k <= 0) fail(backend, " ", family, ": weight shape ", w.n, "x", w.k, " is invalid");
  if (nvfp4_family != (w.kind == SchemeKind::NVFP4))
    fail(backend, " ", family, ": got a ", scheme_kind_name(w.kind), " weight (", w.n, "x", w.k,
         "); NVFP4 weights go to fp4_gemm, Dense/FP8 to dense_gemm");
  if (w.data == nullptr && w.n > 0) fail(backend, " ", family, ": weight ", w.n, "x", w.k, " has no data");
  if (w.kind == SchemeKind::NVFP4) {
    if (w.k % nvfp4::kBlock != 0) fail(backend, " fp4-gemm: k = ", w.k, " is not a multiple of ", nvfp4::kBlock);
    if (w.block_scales == nullptr && w.n > 0) fail(backend, " fp4-gemm: weight ", w.n, "x", w.k, " has no block scales");
  } else if (w.kind == SchemeKind::Dense && w.dtype != DType::BF16 && w.dtype != DType::F16 && w.dtype != DType::F32) {
    fail(backend, " dense GEMM: weight dtype ", dtype_name(w.dtype), " is not supported (BF16, F16, F32, FP8)");
  }
}

void check_attention_args(const AttentionArgs& a, std::int64_t multiple, const std::string& backend) {
  if (a.m < 0 || a.past < 0) fail(backend, " attention: m = ", a.m, ", past = ", a.past, " must be >= 0");
  if (a.num_heads <= 0 || a.num_kv_heads <= 0 || a.num_heads % a.num_kv_heads != 0)
    fail(backend, " attention: ", a.num_heads, " heads do not group over ", a.num_kv_heads, " kv heads");
  if (a.head_dim <= 0 || a.head_dim % multiple != 0)
    fail(backend, " attention: head_dim ", a.head_dim, " is not a positive multiple of ", multiple);
  if (!kv_dtype_supported(a.kv_dtype))
    fail(backend, " attention: KV cache element type ", dtype_name(a.kv_dtype), " is not supported (f32, f16, bf16)");
  if (a.m > 0 && (a.kv_blocks == nullptr || a.block_tokens <= 0 || a.k_offset < 0 || a.v_offset < 0))
    fail(backend, " attention: no KV blocks given (kv_blocks ", a.kv_blocks == nullptr ? "null" : "set",
         ", block_tokens ", a.block_tokens, ")");
}

namespace {

// W4A4: activations become what an NVFP4 activation quantizer would hand the tensor cores.
const float* w4a4_activations(const float* x, std::int64_t m, const WeightMatrix& w) {
  float* q = thread_scratch_as<float>(kScratchGemmW4a4, static_cast<std::size_t>(m * w.k));
  std::memcpy(q, x, static_cast<std::size_t>(m * w.k) * sizeof(float));
  for (std::int64_t i = 0; i < m; ++i) fake_quantize_activations_nvfp4(q + i * w.k, w.k, w.input_scale);
  return q;
}

}  // namespace

void Fp4GemmKernel::run(const float* x, std::int64_t m, const WeightMatrix& w, float* y, Fp4Semantics semantics) const {
  check_gemm_args(w, m, true, backend_);
  if (m == 0 || w.n == 0) return;
  const float* xs = semantics == Fp4Semantics::W4A4 ? w4a4_activations(x, m, w) : x;
  (large_ != nullptr && m >= large_from_ ? large_ : small_)(xs, m, w, y);
}

void DenseGemmKernel::run(const float* x, std::int64_t m, const WeightMatrix& w, float* y, Fp4Semantics) const {
  check_gemm_args(w, m, false, backend_);
  if (m == 0 || w.n == 0) return;
  const bool large = large_ != nullptr && m >= large_from_ && w.kind == SchemeKind::Dense && w.dtype == DType::BF16;
  (large ? large_ : small_)(x, m, w, y);
}

void SimdAttentionKernel::run(const AttentionArgs& args) const {
  check_attention_args(args, multiple_, backend_);
  if (args.m == 0) return;
  core_(args);
}

}  // namespace fp4serve::kernels
