// Selection: `auto` picks the fastest backend that passes, skips what the CPU cannot run,
// honours and validates explicit names, and refuses with a clear error when nothing passes.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <string>

#include "kernels/backend.h"
#include "kernels/model_shapes.h"
#include "kernels/registry.h"
#include "kernels/validation.h"
#include "util/error.h"

namespace fp4serve::kernels {
namespace {

BackendOptions quiet_options() {
  BackendOptions o;
  o.seed = 1234;
  o.inject_faults = "";  // independent of the environment the tests run in
  o.allow_bf16_activations = true;  // rank every backend; the default is tested on its own
  o.allow_int8_activations = true;
  return o;
}

// The runnable backends of a family on this machine, fastest first.
std::vector<std::string> runnable(OpFamily f) {
  std::vector<std::string> out;
  for (const Backend& b : compiled_backends())
    if (b.family(f).present() && cpu_features().missing(b.needs).empty()) out.push_back(b.name);
  return out;
}

// The int8-activation backend auto takes first where it may: amx-int8 on an AMX Xeon (its
// hi + lo tiles on the int8 grid prefill faster than the token groups, which it runs below 20
// tokens), avx512-int8 on an AVX-512 VNNI CPU without AMX, avx2-int8 on an AVX2-only CPU.
const char* int8_backend_auto_takes() {
  const std::vector<std::string> fp4 = runnable(OpFamily::Fp4Gemm);
  auto runs = [&](const char* name) { return std::find(fp4.begin(), fp4.end(), name) != fp4.end(); };
  if (runs("amx-int8")) return "amx-int8";
  if (runs("avx512-int8")) return "avx512-int8";
  if (!cpu_features().usable(CpuFeature::AVX512F) && runs("avx2-int8")) return "avx2-int8";
  return nullptr;
}

const Verdict& verdict(const SelectionReport& r, OpFamily f, const std::string& backend) {
  for (const auto& v : r.family(f).verdicts)
    if (v.backend == backend) return v;
  throw std::runtime_error("no verdict for " + backend);
}

TEST(Registry, AutoPicksTheFastestRunnableBackend) {
  auto sel = select_kernels(quiet_options(), builtin_shapes());
  const SelectionReport r = sel->report();
  for (OpFamily f : {OpFamily::DenseGemm, OpFamily::Fp4Gemm, OpFamily::Moe, OpFamily::Attention}) {
    const auto names = runnable(f);
    ASSERT_FALSE(names.empty());
    EXPECT_EQ(r.family(f).chosen, names.front()) << family_name(f);
    const Verdict& v = verdict(r, f, names.front());
    EXPECT_EQ(v.status, VerdictStatus::Passed);
    EXPECT_GE(v.error, 0.0);
    EXPECT_LE(v.error, v.tolerance);
    // Slower candidates are not run once one passed.
    for (std::size_t i = 1; i < names.size(); ++i) EXPECT_EQ(verdict(r, f, names[i]).status, VerdictStatus::NotTried);
  }
  const KernelSet k = sel->kernels();
  EXPECT_NE(k.fp4_gemm, nullptr);
  EXPECT_NE(k.dense_gemm, nullptr);
  EXPECT_NE(k.moe, nullptr);
  EXPECT_NE(k.attention, nullptr);
  EXPECT_NE(r.to_text().find("fp4-gemm"), std::string::npos);
}

TEST(Registry, TheReferenceValidatesAgainstItsOwnOutputsExactly) {
  // Validation builds the expected outputs in bulk (a GEMM shape's row counts in one reference
  // call); run case by case, the reference must reproduce them bit for bit in every family.
  const Backend* reference = nullptr;
  for (const Backend& b : compiled_backends())
    if (b.name == "reference") reference = &b;
  ASSERT_NE(reference, nullptr);
  for (OpFamily f : {OpFamily::DenseGemm, OpFamily::Fp4Gemm, OpFamily::Moe, OpFamily::Attention, OpFamily::LinearAttention}) {
    FamilyValidator validator(f, builtin_shapes(), 77);
    ASSERT_FALSE(validator.empty()) << family_name(f);
    Verdict v;
    validator.validate(reference->family(f), v);
    EXPECT_EQ(v.status, VerdictStatus::Passed) << family_name(f) << ": " << v.reason;
    EXPECT_EQ(v.error, 0.0) << family_name(f);
  }
}

TEST(Registry, AutoNeverRoundsActivationsToBf16UnlessAllowed) {
  BackendOptions o = quiet_options();
  o.allow_bf16_activations = false;
  o.allow_int8_activations = false;  // else amx-int8 ranks above amx for NVFP4 and MoE
  auto sel = select_kernels(o, builtin_shapes());
  const SelectionReport r = sel->report();
  for (const FamilyReport& fam : r.families) {
    if (fam.chosen.empty()) continue;
    const Verdict& chosen = verdict(r, fam.family, fam.chosen);
    EXPECT_NE(chosen.precision, "bf16-activations") << family_name(fam.family) << " chose " << fam.chosen;
    for (const Verdict& v : fam.verdicts) {
      if (v.precision == "bf16-activations" && v.status != VerdictStatus::Unsupported) {
        EXPECT_EQ(v.status, VerdictStatus::NotTried) << v.backend;
        EXPECT_NE(v.reason.find("--allow-bf16-activations"), std::string::npos) << v.backend << ": " << v.reason;
      }
    }
  }
  // Split activations (bf16 hi + lo, or three parts) are allowed: where this CPU runs AMX, auto
  // takes it for every family it offers (attention: a prefill's tiles, since session 32).
  for (OpFamily f : {OpFamily::Fp4Gemm, OpFamily::DenseGemm, OpFamily::Moe, OpFamily::Attention}) {
    const std::vector<std::string> names = runnable(f);
    if (std::find(names.begin(), names.end(), "amx") == names.end()) continue;
    EXPECT_EQ(r.family(f).chosen, "amx") << family_name(f);
    EXPECT_EQ(verdict(r, f, "amx").precision, "16-bit-activations") << family_name(f);
  }
  const std::vector<std::string> fp4 = runnable(OpFamily::Fp4Gemm);
  // Named explicitly, a bf16-activation backend is still used (when this CPU runs it); allowed,
  // auto takes it first.
  if (std::find(fp4.begin(), fp4.end(), "amx-bf16") != fp4.end()) {
    o.fp4_gemm = "amx-bf16";
    EXPECT_EQ(select_kernels(o, builtin_shapes())->report().family(OpFamily::Fp4Gemm).chosen, "amx-bf16");
    BackendOptions allowed = quiet_options();
    allowed.allow_bf16_activations = true;
    EXPECT_EQ(select_kernels(allowed, builtin_shapes())->report().family(OpFamily::Fp4Gemm).chosen, "amx-bf16");
  }
}

TEST(Registry, AutoNeverQuantizesActivationsToInt8UnlessAllowed) {
  BackendOptions o = quiet_options();
  o.allow_int8_activations = false;
  auto sel = select_kernels(o, builtin_shapes());
  const SelectionReport r = sel->report();
  for (OpFamily f : {OpFamily::Fp4Gemm, OpFamily::Moe}) {
    const FamilyReport& fam = r.family(f);
    EXPECT_NE(verdict(r, f, fam.chosen).precision, "int8-activations") << family_name(f);
    for (const char* name : {"amx-int8", "avx512-int8", "avx2-int8"}) {
      const Verdict& v = verdict(r, f, name);
      if (v.status == VerdictStatus::Unsupported) continue;  // not on this CPU
      EXPECT_EQ(v.status, VerdictStatus::NotTried) << name;
      EXPECT_NE(v.reason.find("--allow-int8-activations"), std::string::npos) << v.reason;
    }
  }
  // Named, each one this CPU runs is used. Allowed, auto takes int8_backend_auto_takes().
  const std::vector<std::string> fp4 = runnable(OpFamily::Fp4Gemm);
  for (const char* name : {"amx-int8", "avx512-int8", "avx2-int8"}) {
    if (std::find(fp4.begin(), fp4.end(), name) == fp4.end()) continue;
    BackendOptions named_options = o;
    named_options.fp4_gemm = name;
    auto named = select_kernels(named_options, builtin_shapes());
    EXPECT_EQ(named->report().family(OpFamily::Fp4Gemm).chosen, name);
    EXPECT_EQ(verdict(named->report(), OpFamily::Fp4Gemm, name).status, VerdictStatus::Passed) << name;
  }
  const char* expected = int8_backend_auto_takes();
  if (expected != nullptr) {
    BackendOptions allowed = quiet_options();  // allows int8 activations
    allowed.allow_bf16_activations = false;   // amx-bf16 would rank above amx-int8
    EXPECT_EQ(select_kernels(allowed, builtin_shapes())->report().family(OpFamily::Fp4Gemm).chosen, expected);
  }
}

// Without AMX (switched off here, so an AMX Xeon runs this too), an AVX-512 VNNI CPU takes the
// fp32-class VNNI backend for NVFP4 and MoE, ahead of avx512, and the fp32 avx512 kernels for the
// families it lacks.
TEST(Registry, WithoutAmxAutoTakesTheVnniThreePartBackend) {
  if (!cpu_features().usable(CpuFeature::AVX512_VNNI) || !cpu_features().usable(CpuFeature::AVX512_VBMI))
    GTEST_SKIP() << "no AVX-512 VNNI + VBMI here";
  BackendOptions o = quiet_options();
  o.allow_int8_activations = false;
  o.cpu = probe_cpu_features("amx_tile");
  auto sel = select_kernels(o, builtin_shapes());
  const SelectionReport r = sel->report();
  EXPECT_EQ(r.family(OpFamily::Fp4Gemm).chosen, "avx512-int8x3");
  EXPECT_EQ(r.family(OpFamily::Moe).chosen, "avx512-int8x3");
  EXPECT_EQ(r.family(OpFamily::DenseGemm).chosen, "avx512");
  EXPECT_EQ(r.family(OpFamily::Attention).chosen, "avx512");
  EXPECT_EQ(verdict(r, OpFamily::Fp4Gemm, "avx512").status, VerdictStatus::NotTried);
}

TEST(Registry, ValidateAllGivesEveryVerdict) {
  BackendOptions o = quiet_options();
  o.validate_all = true;
  auto sel = select_kernels(o, builtin_shapes());
  const SelectionReport r = sel->report();  // report() returns a copy: keep it alive
  for (OpFamily f : {OpFamily::DenseGemm, OpFamily::Fp4Gemm, OpFamily::Moe, OpFamily::Attention})
    for (const auto& name : runnable(f)) {
      const Verdict& v = verdict(r, f, name);
      EXPECT_EQ(v.status, VerdictStatus::Passed) << family_name(f) << " " << name << ": " << v.reason;
      EXPECT_GT(v.seconds, 0.0);
    }
}

TEST(Registry, MissingCpuFeaturesMakeBackendsUnsupported) {
  BackendOptions o = quiet_options();
  o.allow_int8_activations = false;  // the fp32-class order: avx2-int8x3, avx2, then reference
  o.cpu = probe_cpu_features("avx512f,amx_tile");
  auto sel = select_kernels(o, builtin_shapes());
  const SelectionReport r = sel->report();
  for (const char* name : {"amx", "avx512"}) {
    const Verdict& v = verdict(r, OpFamily::Fp4Gemm, name);
    EXPECT_EQ(v.status, VerdictStatus::Unsupported) << name;
    // The reason names the feature, and why it is off: the switch where the CPU has it, the CPU
    // where it has not (an AVX2-only machine).
    EXPECT_NE(v.reason.find("avx512f"), std::string::npos) << v.reason;
    const char* why = cpu_features().usable(CpuFeature::AVX512F) ? "FP4SERVE_CPU_DISABLE" : "no CPU support";
    EXPECT_NE(v.reason.find(why), std::string::npos) << v.reason;
  }
  const bool avx2 = cpu_features().usable(CpuFeature::AVX2);
  // NVFP4 decode on three int8 parts (fp32-class, so auto takes it); the families it lacks on avx2.
  EXPECT_EQ(r.family(OpFamily::Fp4Gemm).chosen, avx2 ? "avx2-int8x3" : "reference");
  EXPECT_EQ(r.family(OpFamily::Moe).chosen, avx2 ? "avx2-int8x3" : "reference");
  EXPECT_EQ(r.family(OpFamily::DenseGemm).chosen, avx2 ? "avx2" : "reference");
}

TEST(Registry, UnsupportedShapeIsSkipped) {
  // head_dim 24: avx2 (x8) runs it, avx512 (x16) does not. head_dim 20: neither does. Check the
  // widest SIMD backend this CPU runs, so that the shape, not the CPU, is what rules it out.
  const bool avx512 = cpu_features().usable(CpuFeature::AVX512F);
  const bool avx2 = cpu_features().usable(CpuFeature::AVX2);
  if (!avx2) GTEST_SKIP() << "no SIMD attention backend runs here";
  const int head_dim = avx512 ? 24 : 20;
  ShapeSet shapes;
  shapes.source = "test";
  shapes.attention = {{4, 2, head_dim}};
  auto sel = select_kernels(quiet_options(), shapes);
  const SelectionReport r = sel->report();
  const Verdict& v = verdict(r, OpFamily::Attention, avx512 ? "avx512" : "avx2");
  EXPECT_EQ(v.status, VerdictStatus::Unsupported);
  EXPECT_NE(v.reason.find("head_dim " + std::to_string(head_dim)), std::string::npos) << v.reason;
  EXPECT_EQ(r.family(OpFamily::Attention).chosen, avx512 ? "avx2" : "reference");
  EXPECT_TRUE(r.family(OpFamily::Fp4Gemm).chosen.empty()) << "no fp4 shapes: not used";
}

TEST(Registry, ExplicitBackendIsValidatedAndUsed) {
  BackendOptions o = quiet_options();
  o.fp4_gemm = "reference";
  o.attention = "reference";
  auto sel = select_kernels(o, builtin_shapes());
  const SelectionReport r = sel->report();
  EXPECT_EQ(r.family(OpFamily::Fp4Gemm).chosen, "reference");
  EXPECT_EQ(verdict(r, OpFamily::Fp4Gemm, "reference").status, VerdictStatus::Passed);
  for (const auto& v : r.family(OpFamily::Fp4Gemm).verdicts)
    if (v.backend != "reference" && v.status != VerdictStatus::Unsupported) {
      EXPECT_EQ(v.status, VerdictStatus::NotTried);
    }
}

TEST(Registry, UnknownOrUnsuitableNamesAreErrors) {
  BackendOptions o = quiet_options();
  o.fp4_gemm = "avx1024";
  try {
    (void)select_kernels(o, builtin_shapes());
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("--fp4-gemm-backend avx1024"), std::string::npos) << m;
    EXPECT_NE(m.find("avx512"), std::string::npos) << "lists the choices: " << m;
  }
  o = quiet_options();
  o.attention = "amx-int8";  // amx-int8 has no attention kernels
  EXPECT_THROW((void)select_kernels(o, builtin_shapes()), Error);
  o = quiet_options();
  o.fp4_gemm = "avx512";
  o.cpu = probe_cpu_features("avx512f");
  try {
    (void)select_kernels(o, builtin_shapes());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("avx512f"), std::string::npos) << e.what();
  }
}

TEST(Registry, SameSeedSameFigures) {
  auto a = select_kernels(quiet_options(), builtin_shapes());
  auto b = select_kernels(quiet_options(), builtin_shapes());
  const SelectionReport ra = a->report(), rb = b->report();
  const auto& fa = ra.family(OpFamily::Fp4Gemm);
  const auto& fb = rb.family(OpFamily::Fp4Gemm);
  EXPECT_EQ(fa.verdicts.front().error, fb.verdicts.front().error);
  BackendOptions fresh = quiet_options();
  fresh.seed = 0;
  EXPECT_NE(select_kernels(fresh, builtin_shapes())->report().seed, 0u);
}

TEST(ModelShapes, Qwen3MoeShapesFromConfig) {
  ModelConfig c;
  c.arch = Arch::Qwen3Moe;
  c.hidden_size = 2048;
  c.num_hidden_layers = 48;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 4;
  c.head_dim = 128;
  c.num_experts = 128;
  c.num_experts_per_tok = 8;
  c.moe_intermediate_size = 768;
  c.norm_topk_prob = true;
  c.vocab_size = 151936;
  c.layer_types.assign(48, LayerType::FullAttention);
  const ShapeSet s = shapes_for_model(c, ResolvedQuantization{});
  auto has = [](const std::vector<GemmShape>& v, std::int64_t n, std::int64_t k) {
    for (const auto& g : v)
      if (g.n == n && g.k == k) return true;
    return false;
  };
  EXPECT_TRUE(has(s.fp4, 768, 2048));
  EXPECT_TRUE(has(s.fp4, 2048, 768));
  EXPECT_TRUE(has(s.fp4, 4096, 2048));
  EXPECT_TRUE(has(s.fp4, 512, 2048));
  EXPECT_TRUE(has(s.fp4, 2048, 4096));
  EXPECT_TRUE(has(s.dense, 128, 2048));
  EXPECT_TRUE(has(s.dense, kValidationCappedN + 151936 % 256, 2048)) << "lm_head N capped, remainder kept";
  ASSERT_EQ(s.moe.size(), 1u);
  EXPECT_EQ(s.moe[0].experts, 128);
  EXPECT_EQ(s.moe[0].top_k, 8);
  ASSERT_EQ(s.attention.size(), 1u);
  EXPECT_EQ(s.attention[0].head_dim, 128);
}

TEST(ModelShapes, FromResolvedModules) {
  ModelConfig c;
  c.arch = Arch::Qwen3Moe;
  c.hidden_size = 64;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.num_experts = 8;
  c.num_experts_per_tok = 2;
  c.moe_intermediate_size = 32;
  c.tie_word_embeddings = false;
  ResolvedQuantization q;
  auto mod = [](std::string name, std::int64_t out, std::int64_t in, SchemeKind kind, DType dt) {
    LinearModule m;
    m.name = std::move(name);
    m.out_features = out;
    m.in_features = in;
    m.scheme.kind = kind;
    m.scheme.storage = dt;
    return m;
  };
  q.modules = {mod("model.embed_tokens", 1000, 64, SchemeKind::Dense, DType::BF16),
               mod("lm_head", 1000, 64, SchemeKind::Dense, DType::BF16),
               mod("model.layers.0.mlp.gate", 8, 64, SchemeKind::Dense, DType::BF16),
               mod("model.layers.0.mlp.experts.0.up_proj", 32, 64, SchemeKind::NVFP4, DType::U8),
               mod("model.layers.0.mlp.experts.1.up_proj", 32, 64, SchemeKind::NVFP4, DType::U8),
               mod("model.layers.0.self_attn.q_proj", 64, 64, SchemeKind::FP8, DType::F8_E4M3),
               mod("mtp.layers.0.fc", 64, 128, SchemeKind::Dense, DType::BF16)};
  const ShapeSet s = shapes_for_model(c, q);
  ASSERT_EQ(s.fp4.size(), 1u) << "experts deduplicated";
  EXPECT_EQ(s.dense.size(), 3u) << "lm_head, router, FP8 q_proj; no embedding (untied), no MTP";
  ASSERT_EQ(s.moe.size(), 1u);
  EXPECT_EQ(s.moe[0].expert_kind, SchemeKind::NVFP4);
  EXPECT_EQ(s.moe[0].router_dtype, DType::BF16);
  // Calibrated for 4-bit activations only when every NVFP4 weight of the text model has an input
  // scale; an MTP or FP8 module's does not count.
  EXPECT_FALSE(s.fp4_activations_calibrated) << "no input scales";
  q.modules[3].scheme.activations_quantized = true;
  EXPECT_FALSE(shapes_for_model(c, q).fp4_activations_calibrated) << "one of two experts";
  q.modules[4].scheme.activations_quantized = true;
  EXPECT_TRUE(shapes_for_model(c, q).fp4_activations_calibrated);
  q.modules[3].scheme.kind = q.modules[4].scheme.kind = SchemeKind::Dense;
  EXPECT_FALSE(shapes_for_model(c, q).fp4_activations_calibrated) << "no NVFP4 weight";
}

// A checkpoint calibrated for 4-bit activations lets auto quantize activations to int8 (the
// int8-activation backends rank first where there is no AMX); --exact-activations and --w4a4
// keep the fp32 class, and every verdict and the report say why.
TEST(Registry, AutoQuantizesActivationsToInt8WhereTheCheckpointWasCalibratedFor4Bits) {
  ShapeSet calibrated = builtin_shapes();
  calibrated.fp4_activations_calibrated = true;
  BackendOptions o = quiet_options();
  o.allow_int8_activations = false;
  const SelectionReport allowed = select_kernels(o, calibrated)->report();
  EXPECT_TRUE(allowed.int8_activations);
  EXPECT_NE(allowed.int8_policy.find("calibrated for 4-bit activations"), std::string::npos) << allowed.int8_policy;
  EXPECT_NE(allowed.to_text().find("int8 activations allowed"), std::string::npos) << allowed.to_text();
  const char* expected = int8_backend_auto_takes();
  if (expected != nullptr)
    for (OpFamily f : {OpFamily::Fp4Gemm, OpFamily::Moe})  // validation still judges it
      if (verdict(allowed, f, expected).status == VerdictStatus::Passed) {
        EXPECT_EQ(allowed.family(f).chosen, expected);
      }
  for (OpFamily f : {OpFamily::Fp4Gemm, OpFamily::Moe})
    for (const Verdict& v : allowed.family(f).verdicts) EXPECT_EQ(v.reason.find("not chosen by auto: quantizes"), std::string::npos) << v.backend;

  struct Refusal {
    const char* what;
    std::function<void(BackendOptions&, ShapeSet&)> set;
    const char* named;
  };
  const Refusal refusals[] = {
      {"--exact-activations", [](BackendOptions& b, ShapeSet&) { b.exact_activations = true; }, "--exact-activations"},
      {"--w4a4", [](BackendOptions&, ShapeSet& s) { s.semantics = Fp4Semantics::W4A4; }, "--w4a4"},
      {"weight-only", [](BackendOptions&, ShapeSet& s) { s.fp4_activations_calibrated = false; }, "--allow-int8-activations"}};
  for (const Refusal& r : refusals) {
    BackendOptions ro = o;
    ShapeSet rs = calibrated;
    r.set(ro, rs);
    const SelectionReport rep = select_kernels(ro, rs)->report();
    EXPECT_FALSE(rep.int8_activations) << r.what;
    EXPECT_NE(rep.int8_policy.find(r.named), std::string::npos) << r.what << ": " << rep.int8_policy;
    for (OpFamily f : {OpFamily::Fp4Gemm, OpFamily::Moe}) {
      EXPECT_NE(verdict(rep, f, rep.family(f).chosen).precision, "int8-activations") << r.what;
      for (const char* name : {"amx-int8", "avx512-int8", "avx2-int8"}) {
        const Verdict& v = verdict(rep, f, name);
        if (v.status == VerdictStatus::Unsupported) continue;
        EXPECT_EQ(v.status, VerdictStatus::NotTried) << r.what << " " << name;
        EXPECT_NE(v.reason.find(r.named), std::string::npos) << r.what << ": " << v.reason;
      }
    }
  }
  // --allow-int8-activations wins over --w4a4 and a weight-only checkpoint, not over
  // --exact-activations (the CLI refuses that pair).
  BackendOptions both = o;
  both.allow_int8_activations = both.exact_activations = true;
  EXPECT_FALSE(select_kernels(both, calibrated)->report().int8_activations);
  both.exact_activations = false;
  ShapeSet w4a4 = calibrated;
  w4a4.semantics = Fp4Semantics::W4A4;
  EXPECT_TRUE(select_kernels(both, w4a4)->report().int8_activations);
}

}  // namespace
}  // namespace fp4serve::kernels
