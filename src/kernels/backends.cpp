// The backends compiled into this binary and what each declares: needed CPU features, speed
// rank, and per family the kernel, its precision class, its M tile and the shapes it supports.
#include <algorithm>
#include <string>

#include "kernels/backend.h"
#include "kernels/gemm_wrappers.h"
#include "kernels/grouped_moe.h"
#include "kernels/isa_kernels.h"
#include "kernels/linear_attention_wrappers.h"
#include "util/error.h"

namespace fp4serve::kernels {

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::Fp32: return "fp32";
    case Precision::Bf16Activations: return "bf16-activations";
    case Precision::Activations16: return "16-bit-activations";
    case Precision::Int8Activations: return "int8-activations";
    case Precision::Int8x3Activations: return "int8x3-activations";
  }
  return "unknown";
}

const FamilyImpl& Backend::family(OpFamily f) const {
  switch (f) {
    case OpFamily::DenseGemm: return dense;
    case OpFamily::Fp4Gemm: return fp4;
    case OpFamily::Moe: return moe;
    case OpFamily::Attention: return attention;
    case OpFamily::LinearAttention: return linear_attention;
  }
  fail("unknown op family");
}

namespace {

// AMX tiles pay once a weight tile is reused for at least one full 16-token tile.
constexpr std::int64_t kAmxFromM = 16;

std::string any_gemm(const GemmShape&) { return {}; }
std::string any_moe(const MoeShape&) { return {}; }

std::string attention_multiple_of(const AttentionShape& s, std::int64_t multiple) {
  if (s.head_dim % multiple == 0) return {};
  return "head_dim " + std::to_string(s.head_dim) + " is not a multiple of " + std::to_string(multiple);
}

std::string dense_dtype_ok(const GemmShape& s) {
  if (s.kind == SchemeKind::FP8) return {};
  if (s.dtype == DType::BF16 || s.dtype == DType::F16 || s.dtype == DType::F32) return {};
  return "dense dtype " + std::string(dtype_name(s.dtype)) + " is not supported";
}

FamilyImpl gemm_family(const GemmKernel* k, Precision p, std::int64_t tile, std::function<std::string(const GemmShape&)> sup) {
  FamilyImpl f;
  f.gemm = k;
  f.precision = p;
  f.m_tile = tile;
  f.gemm_unsupported = std::move(sup);
  return f;
}

FamilyImpl moe_family(const MoeKernel* k, Precision p) {
  FamilyImpl f;
  f.moe = k;
  f.precision = p;
  f.m_tile = 4;
  f.moe_unsupported = any_moe;
  return f;
}

// Linear attention: the recurrence runs step by step in fp32 (Precision::Fp32).
FamilyImpl linear_family(const Conv1dKernel* conv, const DeltaRuleKernel* delta) {
  FamilyImpl f;
  f.conv1d = conv;
  f.delta_rule = delta;
  f.precision = Precision::Fp32;
  f.m_tile = 4;
  f.linear_unsupported = [](const LinearAttentionShape&) { return std::string(); };
  return f;
}

FamilyImpl attention_family(const AttentionKernel* k, std::int64_t multiple, Precision precision = Precision::Fp32) {
  FamilyImpl f;
  f.attention = k;
  f.precision = precision;
  f.m_tile = 4;
  f.attention_unsupported = [multiple](const AttentionShape& s) { return attention_multiple_of(s, multiple); };
  return f;
}

Backend make_reference() {
  const KernelSet ref = reference_kernels();
  Backend b;
  b.name = "reference";
  b.description = "scalar loops, fp64 accumulation: the source of truth";
  b.speed_rank = 0;
  b.dense = gemm_family(ref.dense_gemm, Precision::Fp32, 4, dense_dtype_ok);
  b.fp4 = gemm_family(ref.fp4_gemm, Precision::Fp32, 4, any_gemm);
  b.moe = moe_family(ref.moe, Precision::Fp32);
  b.attention = attention_family(ref.attention, 1);
  b.linear_attention = linear_family(ref.conv1d, ref.delta_rule);
  return b;
}

const std::vector<CpuFeature>& avx2_needs() {
  static const std::vector<CpuFeature> n = {CpuFeature::AVX2, CpuFeature::FMA, CpuFeature::F16C};
  return n;
}

Backend make_avx2() {
  static const DenseGemmKernel dense("avx2", avx2::dense_gemm);
  static const Fp4GemmKernel fp4("avx2", avx2::nvfp4_gemm);
  static const GroupedMoeKernel moe("avx2", {&fp4, &dense, &fp4, &dense}, avx2_vector_math());
  static const SimdAttentionKernel attention("avx2", avx2::attention, 8);
  static const SimdConv1dKernel conv("avx2", avx2::conv1d, avx2_vector_math());
  static const SimdDeltaRuleKernel delta("avx2", avx2::delta_rule, avx2_vector_math());
  Backend b;
  b.name = "avx2";
  b.description = "AVX2+FMA: NVFP4 decoded with 8-lane table permutes (m > 4: once per 16-row fp32 panel), fp32 FMA";
  b.speed_rank = 10;
  b.needs = avx2_needs();
  b.dense = gemm_family(&dense, Precision::Fp32, 4, dense_dtype_ok);
  b.fp4 = gemm_family(&fp4, Precision::Fp32, 4, any_gemm);
  b.moe = moe_family(&moe, Precision::Fp32);
  b.attention = attention_family(&attention, 8);
  b.linear_attention = linear_family(&conv, &delta);
  return b;
}

Backend make_avx512() {
  static const DenseGemmKernel dense("avx512", avx512::dense_gemm);
  static const Fp4GemmKernel fp4("avx512", avx512::nvfp4_gemm);
  static const GroupedMoeKernel moe("avx512", {&fp4, &dense, &fp4, &dense}, avx512_vector_math());
  static const SimdAttentionKernel attention("avx512", avx512::attention, 16);
  static const SimdConv1dKernel conv("avx512", avx512::conv1d, avx512_vector_math());
  static const SimdDeltaRuleKernel delta("avx512", avx512::delta_rule, avx512_vector_math());
  Backend b;
  b.name = "avx512";
  b.description = "AVX-512 F/BW/VL: NVFP4 decoded with 16-lane two-table permutes, fp32 FMA";
  b.speed_rank = 20;
  b.needs = {CpuFeature::AVX512F, CpuFeature::AVX512BW, CpuFeature::AVX512VL, CpuFeature::FMA, CpuFeature::F16C};
  b.dense = gemm_family(&dense, Precision::Fp32, 4, dense_dtype_ok);
  b.fp4 = gemm_family(&fp4, Precision::Fp32, 4, any_gemm);
  b.moe = moe_family(&moe, Precision::Fp32);
  b.attention = attention_family(&attention, 16);
  b.linear_attention = linear_family(&conv, &delta);
  return b;
}

// Decode backends on integer dot products (avx2-int8/-int8x3, avx512-int8/-int8x3): NVFP4
// GEMMs and the MoE's experts run the integer kernel `fp4`; the router stays on the exact fp32
// kernel of the same instruction set (expert choice never sees quantized activations), and dense
// weights on its fp32 dense GEMM. The backends of one instruction set differ in how finely
// activations are carried. They declare no attention or dense family: the fp32 backend of their
// instruction set covers those.
struct IntegerKernels {
  const char* name;
  Fp4GemmKernel fp4;
  DenseGemmKernel dense;
  Fp4GemmKernel router_fp4;
  GroupedMoeKernel moe;
  IntegerKernels(const char* backend, GemmCore integer, GemmCore exact, GemmCore dense_core, const VectorMath& vm)
      : name(backend), fp4(backend, integer), dense(backend, dense_core), router_fp4(backend, exact),
        moe(backend, {&fp4, &dense, &router_fp4, &dense}, vm) {}
};

// (The kernels are statics of the caller: the Backend keeps pointers.)
Backend integer_backend(const IntegerKernels& k, const char* description, int rank, Precision p,
                        const std::vector<CpuFeature>& needs) {
  Backend b;
  b.name = k.name;
  b.description = description;
  b.speed_rank = rank;
  b.needs = needs;
  b.fp4 = gemm_family(&k.fp4, p, 4, any_gemm);
  b.moe = moe_family(&k.moe, p);
  return b;
}

// Function-local statics, as amx_needs(): compiled_backends() may run before this file's
// namespace-scope objects are initialized.
const std::vector<CpuFeature>& vnni_needs() {
  static const std::vector<CpuFeature> n = {CpuFeature::AVX512F,     CpuFeature::AVX512BW,    CpuFeature::AVX512VL,
                                            CpuFeature::AVX512DQ,    CpuFeature::AVX512_VNNI, CpuFeature::AVX512_VBMI,
                                            CpuFeature::FMA,         CpuFeature::F16C};
  return n;
}

// One int8 per activation: on AVX2-only CPUs the exact fp32 decode of E2M1 is ALU-bound
// (docs/perf.md, session 8), integer dot products are not. The quantization moves logits by about
// 1 %, so auto takes it only for checkpoints calibrated for 4-bit activations, or with
// --allow-int8-activations (registry.cpp, int8_policy). m > 4 in 8-token tiles.
Backend make_avx2_int8() {
  static const IntegerKernels k("avx2-int8", avx2::nvfp4_gemm_int8, avx2::nvfp4_gemm, avx2::dense_gemm, avx2_vector_math());
  return integer_backend(k,
                         "AVX2: NVFP4 with activations as int8 per 16-element block, integer dot products "
                         "(decode per row, m > 4 in 8-token tiles)",
                         15, Precision::Int8Activations, avx2_needs());
}

// Three int8 parts per activation block: the same dot products three times per decoded weight,
// at fp32-class precision, so `auto` takes it; on AVX2-only CPUs it replaces the fp32 decode.
Backend make_avx2_int8x3() {
  static const IntegerKernels k("avx2-int8x3", avx2::nvfp4_gemm_int8x3, avx2::nvfp4_gemm, avx2::dense_gemm,
                                avx2_vector_math());
  return integer_backend(k,
                         "AVX2: NVFP4 decode (m <= 4) with activations as three int8 parts per 16-element block "
                         "(within 6.1e-8 of the block max), integer dot products; m > 4 as avx2",
                         12, Precision::Int8x3Activations, avx2_needs());
}

// The same two classes on AVX-512 VNNI + VBMI (vpdpbusd: 64 products per instruction; vpermb).
// On a Zen 4 the fp32 avx512 decode is ALU-bound at 26 GB/s from cache; the one-part kernel
// streams 49 (docs/perf.md, session 11). It ranks above amx (whose fp32 decode is slower) but
// below amx-int8, which runs these kernels below 20 tokens and AMX tiles on the same int8 grid
// from there (session 31).
Backend make_avx512_int8() {
  static const IntegerKernels k("avx512-int8", vnni::nvfp4_gemm_int8, avx512::nvfp4_gemm, avx512::dense_gemm,
                                avx512_vector_math());
  return integer_backend(k,
                         "AVX-512 VNNI: NVFP4 with activations as int8 per 16-element block, vpdpbusd dot products "
                         "(decode per row, 5..15 tokens in 8-token tiles, from 16 in token groups)",
                         33, Precision::Int8Activations, vnni_needs());
}

Backend make_avx512_int8x3() {
  static const IntegerKernels k("avx512-int8x3", vnni::nvfp4_gemm_int8x3, avx512::nvfp4_gemm, avx512::dense_gemm,
                                avx512_vector_math());
  return integer_backend(k,
                         "AVX-512 VNNI: NVFP4 decode (m <= 2) with activations as three int8 parts per 16-element "
                         "block (within 6.1e-8 of the block max), vpdpbusd dot products; m > 2 as avx512",
                         22, Precision::Int8x3Activations, vnni_needs());
}

const std::vector<CpuFeature>& amx_needs() {
  static const std::vector<CpuFeature> n = {
      CpuFeature::AMX_TILE,    CpuFeature::AMX_BF16,    CpuFeature::AVX512F, CpuFeature::AVX512BW, CpuFeature::AVX512VL,
      CpuFeature::AVX512_BF16, CpuFeature::AVX512_VBMI, CpuFeature::FMA,     CpuFeature::F16C};
  return n;
}

// AMX tiles for M >= 16 (prefill, batched decode) and, for NVFP4, from 9 tokens on the same
// tiles and at 5..8 on narrow ones;
// the fp32 AVX-512 kernels elsewhere (amx::nvfp4_gemm_split picks per m). The router
// stays on the fp32 AVX-512 kernels (see MoeGemms); attention is make_amx's alone (below).
// NVFP4 weights run against bf16 hi + lo activation pairs;
// dense BF16 weights against three parts, since hi + lo moved the qwen3_next oracle logits
// 1.9e-4 from transformers' (fp32: 1e-5; NVFP4 through hi + lo: 1.8-4e-5).
// An AMX backend around its GEMM and MoE kernels (statics of the caller: the Backend keeps
// pointers). The two AMX backends differ only in kernels, precision, name and rank.
Backend amx_backend(const char* name, const char* description, int rank, Precision p, const Fp4GemmKernel& fp4,
                    const DenseGemmKernel& dense, const GroupedMoeKernel& moe) {
  Backend b;
  b.name = name;
  b.description = description;
  b.speed_rank = rank;
  b.needs = amx_needs();
  b.dense = gemm_family(&dense, p, kAmxFromM, dense_dtype_ok);
  b.fp4 = gemm_family(&fp4, p, kAmxFromM, any_gemm);
  b.moe = moe_family(&moe, p);
  return b;
}

Backend make_amx() {
  static const Fp4GemmKernel fp4("amx", amx::nvfp4_gemm_split);  // every m: it picks tiles or avx512
  static const DenseGemmKernel dense("amx", avx512::dense_gemm, amx::bf16_gemm_split3, kAmxFromM);
  static const DenseGemmKernel router_dense("amx", avx512::dense_gemm);
  static const Fp4GemmKernel router_fp4("amx", avx512::nvfp4_gemm);
  static const GroupedMoeKernel moe("amx", {&fp4, &dense, &router_fp4, &router_dense}, avx512_vector_math());
  // Attention: a prefill's score and value products on tiles (amx/attention_prefill_amx.cpp),
  // everything else on avx512's kernels. The matrices are per sequence, but at depth they are a
  // large share of a prefill's arithmetic.
  static const SimdAttentionKernel attention("amx", amx::attention, 16);
  Backend b = amx_backend("amx",
                          "AMX BF16 tiles at M >= 16 (prefill, batches; NVFP4 from M = 5; prefill attention), "
                          "activations as bf16 hi + lo pairs (NVFP4, attention) or three parts (BF16); AVX-512 elsewhere",
                          30, Precision::Activations16, fp4, dense, moe);
  b.attention = attention_family(&attention, 16, Precision::Activations16);
  return b;
}

// Tokens from which amx-int8 takes the tiles: below, the VNNI token groups (16 tokens in one
// group) were faster; at 20 they tied and from 24 the tiles won, 1.1-1.3x up to 48 and 1.5x at
// 512 (kernels_bench nvfp4_m*, two threads, docs/perf.md, session 31).
constexpr std::int64_t kAmxInt8FromM = 20;

// Checkpoints calibrated for 4-bit activations on an AMX Xeon: NVFP4 below 20 tokens (decode,
// batched decode's experts and its 16-token attention projections) on the avx512-int8 kernels,
// from 20 tokens (prefill) on amx::nvfp4_gemm_int8_grid. Ranked above avx512-int8: with two parts
// and chunked tiles it prefills 30b-a3b 1.27x faster (session 31); below 20 tokens the two run
// the same kernels. Its precision class is the int8 one, so int8_policy decides, as for
// avx512-int8. It declares no dense or attention family: amx and avx512 cover those.
//
// The tiles run on the activations the int8 kernels quantize, rounded back to floats as they are
// packed: q * step with the grid's bf16 step (numerics/int8_grid_step.h) has at most 15
// significant bits, so the hi + lo pair carries it exactly (the decoded weights are exact in bf16
// too). A token's result then does not depend on how many tokens share its call: alone (the int8
// GEMV) and batched with 30 others (the tiles) it differs by fp32 summation order only. Tiles on
// the raw activations were 0.7 % off the int8 GEMV, and hi + lo on the fp32-step grid of sessions
// 14-30 4e-6: both flipped greedy tokens between 16 streams and each alone
// (tests/integration/test_concurrency.py). That grid needed a third part, about 20 % of prefill,
// and rounding in a pass of its own took 8 % of a pp512 run's samples (session 31).
Backend make_amx_int8() {
  static const Fp4GemmKernel fp4("amx-int8", vnni::nvfp4_gemm_int8, amx::nvfp4_gemm_int8_grid, kAmxInt8FromM);
  static const DenseGemmKernel dense("amx-int8", avx512::dense_gemm, amx::bf16_gemm_split3, kAmxFromM);
  static const DenseGemmKernel router_dense("amx-int8", avx512::dense_gemm);
  static const Fp4GemmKernel router_fp4("amx-int8", avx512::nvfp4_gemm);
  static const GroupedMoeKernel moe("amx-int8", {&fp4, &dense, &router_fp4, &router_dense}, avx512_vector_math());
  static const std::vector<CpuFeature> needs = [] {
    std::vector<CpuFeature> n = amx_needs();
    n.push_back(CpuFeature::AVX512DQ);
    n.push_back(CpuFeature::AVX512_VNNI);
    return n;
  }();
  Backend b;
  b.name = "amx-int8";
  b.description =
      "NVFP4 below 20 tokens with activations as int8 per 16-element block (avx512-int8's VNNI kernels), "
      "from 20 tokens on AMX BF16 tiles fed those int8-rounded activations as bf16 hi + lo (exact)";
  b.speed_rank = 34;
  b.needs = needs;
  b.fp4 = gemm_family(&fp4, Precision::Int8Activations, kAmxFromM, any_gemm);  // 16-token tiles
  b.moe = moe_family(&moe, Precision::Int8Activations);
  return b;
}

// The same tiles with activations rounded to bf16 once: half the tile work, opt-in only
// (--allow-bf16-activations), since that rounding can flip a greedy token.
Backend make_amx_bf16() {
  static const DenseGemmKernel dense("amx-bf16", avx512::dense_gemm, amx::bf16_gemm, kAmxFromM);
  static const Fp4GemmKernel fp4("amx-bf16", avx512::nvfp4_gemm, amx::nvfp4_gemm, kAmxFromM);
  static const DenseGemmKernel router_dense("amx-bf16", avx512::dense_gemm);
  static const Fp4GemmKernel router_fp4("amx-bf16", avx512::nvfp4_gemm);
  static const GroupedMoeKernel moe("amx-bf16", {&fp4, &dense, &router_fp4, &router_dense}, avx512_vector_math());
  return amx_backend("amx-bf16", "AMX BF16 tiles for M >= 16 (prefill), AVX-512 below; activations rounded to bf16", 35,
                     Precision::Bf16Activations, fp4, dense, moe);
}

}  // namespace

// Fastest first: the registry tries candidates in this order, so speed_rank alone decides it.
const std::vector<Backend>& compiled_backends() {
  static const std::vector<Backend> all = [] {
    std::vector<Backend> v = {make_amx_bf16(), make_amx_int8(), make_amx(), make_avx512_int8(), make_avx512_int8x3(), make_avx512(),
                              make_avx2_int8(), make_avx2_int8x3(), make_avx2(), make_reference()};
    std::stable_sort(v.begin(), v.end(), [](const Backend& a, const Backend& b) { return a.speed_rank > b.speed_rank; });
    return v;
  }();
  return all;
}

const Backend* find_backend(std::string_view name) {
  for (const Backend& b : compiled_backends())
    if (b.name == name) return &b;
  return nullptr;
}

}  // namespace fp4serve::kernels
