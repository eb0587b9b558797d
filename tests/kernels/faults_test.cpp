// Deliberately broken backends: for every op family and every fault kind, `auto` never selects
// the broken backend, falls back to the next one, and says why; a named broken backend refuses
// to start; a fault that appears only after start (late-nan) is caught by the run-time guard.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <string>

#include "kernels/backend.h"
#include "kernels/faults.h"
#include "kernels/paged_kv.h"
#include "kernels/model_shapes.h"
#include "kernels/random_data.h"
#include "kernels/registry.h"
#include "kernels/validation.h"
#include "util/error.h"

namespace fp4serve::kernels {
namespace {

constexpr OpFamily kFamilies[] = {OpFamily::DenseGemm, OpFamily::Fp4Gemm, OpFamily::Moe, OpFamily::Attention,
                                  OpFamily::LinearAttention};
constexpr FaultKind kStartKinds[] = {FaultKind::Nan, FaultKind::Zeros, FaultKind::NibbleSwap, FaultKind::NoBlockScale,
                                     FaultKind::Tail};

std::vector<std::string> runnable(OpFamily f) {
  std::vector<std::string> out;
  for (const Backend& b : compiled_backends())
    if (b.family(f).present() && cpu_features().missing(b.needs).empty()) out.push_back(b.name);
  return out;
}

// The built-in shapes of one family only, so each case validates one family.
ShapeSet only(OpFamily f) {
  const ShapeSet all = builtin_shapes();
  ShapeSet s;
  s.source = all.source;
  if (f == OpFamily::DenseGemm) s.dense = all.dense;
  if (f == OpFamily::Fp4Gemm) s.fp4 = all.fp4;
  if (f == OpFamily::Moe) s.moe = all.moe;
  if (f == OpFamily::Attention) s.attention = all.attention;
  if (f == OpFamily::LinearAttention) s.linear_attention = all.linear_attention;
  return s;
}

BackendOptions with_faults(const std::string& spec) {
  BackendOptions o;
  o.seed = 99;
  o.inject_faults = spec;
  o.revalidate_interval_s = 0;
  o.allow_bf16_activations = true;  // every backend takes part, the fastest (amx) first
  o.allow_int8_activations = true;
  return o;
}

const Verdict& verdict(const SelectionReport& r, OpFamily f, const std::string& backend) {
  for (const auto& v : r.family(f).verdicts)
    if (v.backend == backend) return v;
  throw std::runtime_error("no verdict for " + backend);
}

// One real (non-validation) call of the family's selected kernel; true if its output has NaN.
bool real_call_gives_nan(const KernelSet& k, OpFamily f) {
  Rng rng(7);
  std::vector<float> out;
  switch (f) {
    case OpFamily::DenseGemm:
    case OpFamily::Fp4Gemm: {
      const bool fp4 = f == OpFamily::Fp4Gemm;
      auto w = random_weight(rng, fp4 ? SchemeKind::NVFP4 : SchemeKind::Dense, fp4 ? DType::U8 : DType::BF16, 32, 64);
      const auto x = random_activations(rng, 1, 64);
      out.resize(32);
      (fp4 ? k.fp4_gemm : k.dense_gemm)->run(x.data(), 1, w->w, out.data(), Fp4Semantics::W4A16);
      break;
    }
    case OpFamily::Moe: {
      MoeShape s = builtin_shapes().moe[0];
      auto moe = random_moe(rng, s, 1 << 20);
      const auto x = random_activations(rng, 1, s.hidden);
      out.resize(static_cast<std::size_t>(s.hidden));
      k.moe->run(x.data(), 1, moe->layer, out.data(), Fp4Semantics::W4A16);
      break;
    }
    case OpFamily::Attention: {
      const auto q = random_activations(rng, 1, 4 * 16), kv = random_activations(rng, 3, 2 * 16);
      out.resize(q.size());
      const PagedKvCopy paged(kv.data(), kv.data(), 3, 2, 16, 2);
      AttentionArgs a;
      a.q = q.data();
      a.out = out.data();
      paged.point(a);
      a.m = 1;
      a.past = 2;
      a.num_heads = 4;
      a.num_kv_heads = 2;
      a.head_dim = 16;
      a.scale = 0.25f;
      k.attention->run(a);
      break;
    }
    case OpFamily::LinearAttention: {
      // A decode step of the delta rule (one call; the conv1d has its own call count).
      const std::int64_t Hk = 1, Hv = 2, dk = 8, dv = 4;
      const auto q = random_activations(rng, 1, Hk * dk), kk = random_activations(rng, 1, Hk * dk);
      const auto v = random_activations(rng, 1, Hv * dv);
      const std::vector<float> g(Hv, -0.1f), beta(Hv, 0.5f);
      std::vector<float> state(static_cast<std::size_t>(Hv * dk * dv), 0.0f);
      out.resize(static_cast<std::size_t>(Hv * dv));
      k.delta_rule->run({q.data(), kk.data(), v.data(), g.data(), beta.data(), state.data(), out.data(), 1, Hk, Hv, dk, dv});
      break;
    }
  }
  for (float v : out)
    if (std::isnan(v)) return true;
  return false;
}

TEST(Faults, AutoNeverSelectsABrokenBackend) {
  for (OpFamily f : kFamilies) {
    const auto names = runnable(f);
    ASSERT_GE(names.size(), 2u) << "needs a backend to fall back to";
    const std::string target = names[0], next = names[1];
    for (FaultKind kind : kStartKinds) {
      const std::string spec = target + "/" + std::string(family_name(f)) + ":" + std::string(fault_kind_name(kind));
      SCOPED_TRACE(spec);
      auto sel = select_kernels(with_faults(spec), only(f));
      const SelectionReport r = sel->report();
      EXPECT_EQ(r.family(f).chosen, next);
      const Verdict& v = verdict(r, f, target);
      EXPECT_EQ(v.status, VerdictStatus::Failed);
      ASSERT_EQ(v.faults.size(), 1u);
      EXPECT_EQ(v.faults[0], spec);
      EXPECT_FALSE(v.reason.empty());
      switch (kind) {
        case FaultKind::Nan: EXPECT_NE(v.reason.find("non-finite"), std::string::npos) << v.reason; break;
        case FaultKind::Tail: {
          // M = 1 passed; the first validation M with rows past one of this backend's full M
          // tiles is where it fails.
          const std::int64_t tile = find_backend(target)->family(f).m_tile;
          auto first_past_a_tile = [&](const auto& ms) {
            for (std::int64_t m : ms)
              if (m > tile && m % tile != 0) return m;
            return std::int64_t{0};
          };
          const std::int64_t first = f == OpFamily::Moe ? first_past_a_tile(kMoeValidationM) : first_past_a_tile(kGemmValidationM);
          EXPECT_NE(v.reason.find("M=" + std::to_string(first)), std::string::npos) << v.reason;
          EXPECT_NE(v.reason.find("unwritten"), std::string::npos) << v.reason;
          break;
        }
        default:
          // Wrong numbers; byte-swapped BF16 may even decode to Inf/NaN patterns.
          EXPECT_TRUE(v.reason.find("> tolerance") != std::string::npos || v.reason.find("non-finite") != std::string::npos)
              << v.reason;
      }
      EXPECT_EQ(verdict(r, f, next).status, VerdictStatus::Passed);
      EXPECT_FALSE(real_call_gives_nan(sel->kernels(), f));
    }
  }
}

TEST(Faults, NamedBrokenBackendRefusesToStart) {
  for (OpFamily f : kFamilies) {
    const std::string target = runnable(f)[0];
    BackendOptions o = with_faults(target + ":zeros");
    switch (f) {
      case OpFamily::DenseGemm: o.dense = target; break;
      case OpFamily::Fp4Gemm: o.fp4_gemm = target; break;
      case OpFamily::Moe: o.moe = target; break;
      case OpFamily::Attention: o.attention = target; break;
      case OpFamily::LinearAttention: o.linear_attention = target; break;
    }
    try {
      (void)select_kernels(o, only(f));
      ADD_FAILURE() << family_name(f) << ": started with a broken " << target;
    } catch (const Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find(std::string(family_flag(f)) + " " + target), std::string::npos) << m;
      EXPECT_NE(m.find("Refusing to start"), std::string::npos) << m;
      EXPECT_NE(m.find("> tolerance"), std::string::npos) << "names the error figure: " << m;
    }
  }
}

TEST(Faults, EverythingBrokenIsAnError) {
  std::string spec;
  for (const auto& name : runnable(OpFamily::Fp4Gemm)) spec += (spec.empty() ? "" : ",") + name + ":nan";
  try {
    (void)select_kernels(with_faults(spec), only(OpFamily::Fp4Gemm));
    FAIL();
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("no fp4-gemm backend passed validation"), std::string::npos) << m;
    EXPECT_NE(m.find("reference: failed"), std::string::npos) << m;
  }
}

TEST(Faults, LateNanIsCaughtByTheGuardAndFallsBack) {
  for (OpFamily f : kFamilies) {
    const auto names = runnable(f);
    const std::string target = names[0], next = names[1];
    SCOPED_TRACE(std::string(family_name(f)));
    auto sel = select_kernels(with_faults(target + ":late-nan:1"), only(f));
    EXPECT_EQ(sel->report().family(f).chosen, target) << "late-nan passes validation at start";
    const std::uint64_t gen = sel->generation();
    EXPECT_FALSE(real_call_gives_nan(sel->kernels(), f)) << "call 1 is still fine";
    EXPECT_TRUE(real_call_gives_nan(sel->kernels(), f)) << "call 2 breaks";

    const GuardOutcome out = sel->report_non_finite("logits of request 1");
    EXPECT_TRUE(out.revalidated);
    EXPECT_TRUE(out.kernels_changed);
    EXPECT_TRUE(out.healthy);
    ASSERT_FALSE(out.actions.empty());
    EXPECT_NE(out.actions[0].find("now using " + next), std::string::npos) << out.actions[0];
    EXPECT_GT(sel->generation(), gen);
    const SelectionReport r = sel->report();
    EXPECT_EQ(r.family(f).chosen, next);
    const Verdict& v = verdict(r, f, target);
    EXPECT_EQ(v.status, VerdictStatus::Failed);
    EXPECT_TRUE(v.suspect);
    EXPECT_NE(v.reason.find("re-validation"), std::string::npos) << v.reason;
    EXPECT_EQ(r.counters.non_finite_events, 1u);
    EXPECT_EQ(r.counters.revalidations, 1u);
    EXPECT_EQ(r.counters.revalidation_failures, 1u);
    EXPECT_EQ(r.counters.fallbacks, 1u);
    EXPECT_FALSE(real_call_gives_nan(sel->kernels(), f));
    const auto j = r.to_json();
    EXPECT_EQ(j["guard"]["fallbacks"], 1);
    EXPECT_EQ(j["guard_events"][0]["where"], "logits of request 1");
  }
}

TEST(Faults, GuardRevalidatesAHealthyBackendAndKeepsIt) {
  BackendOptions o = with_faults("");
  o.revalidate_interval_s = 3600;
  auto sel = select_kernels(o, only(OpFamily::Fp4Gemm));
  const std::string chosen = sel->report().family(OpFamily::Fp4Gemm).chosen;
  GuardOutcome a = sel->report_non_finite("request 1");
  EXPECT_TRUE(a.revalidated);
  EXPECT_FALSE(a.kernels_changed);
  EXPECT_TRUE(a.healthy);
  EXPECT_EQ(sel->report().family(OpFamily::Fp4Gemm).chosen, chosen);
  // Within the interval the next event is only counted.
  GuardOutcome b = sel->report_non_finite("request 2");
  EXPECT_FALSE(b.revalidated);
  const GuardCounters c = sel->counters();
  EXPECT_EQ(c.non_finite_events, 2u);
  EXPECT_EQ(c.revalidations, 1u);
  EXPECT_EQ(c.skipped, 1u);
  EXPECT_EQ(c.fallbacks, 0u);
}

TEST(Faults, PinnedBackendFailingAtRunTimeIsUnhealthyNotSwapped) {
  const std::string target = runnable(OpFamily::Fp4Gemm)[0];
  BackendOptions o = with_faults(target + ":late-nan");
  o.fp4_gemm = target;
  auto sel = select_kernels(o, only(OpFamily::Fp4Gemm));
  EXPECT_TRUE(real_call_gives_nan(sel->kernels(), OpFamily::Fp4Gemm));
  const GuardOutcome out = sel->report_non_finite("request 9");
  EXPECT_FALSE(out.healthy);
  EXPECT_FALSE(out.kernels_changed);
  EXPECT_EQ(sel->report().family(OpFamily::Fp4Gemm).chosen, target);
  EXPECT_NE(out.actions[0].find("pins it"), std::string::npos) << out.actions[0];
}

TEST(Faults, SpecParsing) {
  const auto specs = parse_fault_specs("avx512:nan,avx2/moe:late-nan:3,reference/attention:tail");
  ASSERT_EQ(specs.size(), 3u);
  EXPECT_EQ(specs[0].backend, "avx512");
  EXPECT_FALSE(specs[0].family.has_value());
  EXPECT_EQ(specs[1].family, OpFamily::Moe);
  EXPECT_EQ(specs[1].after_calls, 3);
  EXPECT_EQ(specs[2].kind, FaultKind::Tail);
  EXPECT_EQ(faults_for(specs, "avx512", OpFamily::Moe).size(), 1u);
  EXPECT_EQ(faults_for(specs, "avx2", OpFamily::Fp4Gemm).size(), 0u);
  for (const char* bad : {"avx512", "avx9000:nan", "avx512:melt", "avx512/gpu:nan", "avx512:nan:3", "avx512:late-nan:x"}) {
    try {
      (void)parse_fault_specs(bad);
      ADD_FAILURE() << bad;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("FP4SERVE_INJECT_FAULT"), std::string::npos) << e.what();
    }
  }
}

TEST(Faults, EnvironmentVariableIsRead) {
  const std::string target = runnable(OpFamily::Fp4Gemm)[0];
  ::setenv("FP4SERVE_INJECT_FAULT", (target + ":nibble-swap").c_str(), 1);
  BackendOptions o;
  o.seed = 5;
  auto sel = select_kernels(o, only(OpFamily::Fp4Gemm));
  ::unsetenv("FP4SERVE_INJECT_FAULT");
  EXPECT_NE(sel->report().family(OpFamily::Fp4Gemm).chosen, target);
  EXPECT_EQ(sel->report().injected_faults, target + ":nibble-swap");
}

}  // namespace
}  // namespace fp4serve::kernels
