#pragma once
// The backend flags every command that runs a model takes (--fp4-gemm-backend, --moe-backend,
// --dense-backend, --attention-backend, --linear-attention-backend, --allow-bf16-activations,
// --allow-int8-activations, --exact-activations, --w4a4, --kv-cache-dtype). Header-only on purpose: it needs CLI11, which the
// kernels library does not link; only command files (src/cli/) include it.
#include <CLI/CLI.hpp>

#include <string>

#include "kernels/kv_cache.h"
#include "kernels/registry.h"
#include "kernels/shapes.h"

namespace fp4serve::kernels {

inline void add_backend_options(CLI::App& cmd, BackendOptions& options) {
  const struct {
    OpFamily family;
    std::string* target;
    const char* what;
  } flags[] = {{OpFamily::Fp4Gemm, &options.fp4_gemm, "NVFP4 GEMM backend"},
               {OpFamily::Moe, &options.moe, "MoE (routing + expert GEMMs) backend"},
               {OpFamily::DenseGemm, &options.dense, "dense (BF16/F16/F32/FP8) GEMM backend"},
               {OpFamily::Attention, &options.attention, "attention backend"},
               {OpFamily::LinearAttention, &options.linear_attention,
                "linear-attention (Gated DeltaNet conv1d + delta rule) backend"}};
  for (const auto& f : flags) {
    std::string choices;
    for (const auto& c : backend_choices(f.family)) choices += (choices.empty() ? "" : ", ") + c;
    cmd.add_option(std::string(family_flag(f.family)), *f.target,
                   std::string(f.what) + ": auto (fastest that passes validation) or one of " + choices +
                       "; a named backend must pass validation too")
        ->check(CLI::IsMember(backend_choices(f.family)))
        ->capture_default_str();
  }
  cmd.add_flag("--allow-bf16-activations", options.allow_bf16_activations,
               "Let auto choose amx-bf16 (prefill tiles with activations rounded to bf16 once): ~15% faster prefill than "
               "the default amx (bf16 hi + lo pairs, ~2^-17; three parts for BF16 weights), but it can flip a greedy token against fp32");
  auto* int8 = cmd.add_flag(
      "--allow-int8-activations", options.allow_int8_activations,
      "Let auto choose amx-int8, avx512-int8 or avx2-int8 (NVFP4 GEMMs with activations quantized to int8 per "
      "16-element block, finer than llama.cpp's Q8_0) for a weight-only (W4A16) checkpoint too; auto already does for checkpoints whose "
      "NVFP4 weights carry input scales (calibrated for 4-bit activations). On an AVX-512 EPYC (Zen 4) prefill runs "
      "about 2x the fp32 class and decode 1.0-1.5x, on an AVX2-only EPYC decode 1.5-1.6x, on an AMX Xeon decode "
      "1.1x, batched decode 1.2x and prefill about the same (amx-int8 against amx's AMX tiles); outputs about 1% off fp32");
  cmd.add_flag("--exact-activations", options.exact_activations,
               "Keep auto on fp32-class kernels (activations unquantized, or split into parts within ~2^-17) even for a "
               "checkpoint calibrated for 4-bit activations: validated at the fp32 tolerance (1e-4); slower decode "
               "everywhere, slower prefill where there is no AMX (on an AMX Xeon prefill about the same)")
      ->excludes(int8);
  cmd.add_option_function<std::string>(
         "--kv-cache-dtype", [&options](const std::string& name) { options.kv_cache_dtype = *kv_dtype_from_name(name); },
         "KV cache element type: f32 (default: attention reads exactly what the model computed), f16 (llama.cpp's "
         "default) or bf16 (vLLM's auto for BF16 models); f16 and bf16 halve the cache's memory and what decode reads "
         "from it per token, with keys and values rounded to 11 or 8 significant bits")
      ->check(CLI::IsMember({"f32", "f16", "bf16", "float32", "float16", "bfloat16"}))
      ->default_str("f32");
  cmd.add_flag_callback(
      "--w4a4", [&options] { options.semantics = Fp4Semantics::W4A4; },
      "NVFP4 with activations quantized by each layer's input_scale, as Blackwell GPUs compute "
      "(default W4A16: unquantized activations)");
}

}  // namespace fp4serve::kernels
