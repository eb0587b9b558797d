// The linear-attention op families (conv1d + SiLU with state, gated delta rule): the reference
// against the definitions, state carried across calls equal to one call, and the chunked delta
// rule (transformers' prefill form) equal to the recurrence.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/isa_kernels.h"
#include "kernels/kernels.h"
#include "kernels/model_shapes.h"
#include "kernels/registry.h"
#include "kernels/vector_math.h"

namespace fp4serve::kernels {
namespace {

std::vector<float> random_vec(std::mt19937& rng, std::size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

double silu(double v) { return v / (1.0 + std::exp(-v)); }

// Every element of `got` within rel * (1 + |want|) of `want`; names the first one that is not.
::testing::AssertionResult near(const std::vector<float>& got, const std::vector<float>& want, double rel) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes " << got.size() << " != " << want.size();
  }
  for (std::size_t i = 0; i < want.size(); ++i) {
    if (!(std::abs(static_cast<double>(got[i]) - want[i]) <= rel * (1.0 + std::abs(want[i])))) {  // NaN fails
      return ::testing::AssertionFailure() << "element " << i << ": " << got[i] << " vs " << want[i];
    }
  }
  return ::testing::AssertionSuccess();
}

// m steps of C channels (x in [-x_abs, x_abs]) and a width-K filter (in [-1, 1]).
struct ConvInputs {
  std::int64_t m, C, K;
  std::vector<float> x, w;
  ConvInputs(std::mt19937& rng, std::int64_t m_, std::int64_t c, std::int64_t k, float x_abs)
      : m(m_), C(c), K(k), x(random_vec(rng, static_cast<std::size_t>(m * C), -x_abs, x_abs)),
        w(random_vec(rng, static_cast<std::size_t>(K * C), -1, 1)) {}
  std::vector<float> zero_state() const { return std::vector<float>(static_cast<std::size_t>((K - 1) * C), 0.0f); }
  Conv1dArgs args(std::int64_t t0, std::int64_t len, float* st, float* out) const {
    return {x.data() + t0 * C, out + t0 * C, st, w.data(), len, C, K};
  }
};

TEST(Conv1dReference, MatchesTheCausalDefinitionWithZeroHistory) {
  std::mt19937 rng(1);
  const ConvInputs in(rng, 6, 3, 4, 1);
  const std::int64_t C = in.C, K = in.K, m = in.m;
  const auto& x = in.x;
  const auto& w = in.w;
  std::vector<float> state = in.zero_state(), out(x.size());
  reference_conv1d()->run(in.args(0, m, state.data(), out.data()));
  for (std::int64_t t = 0; t < m; ++t)
    for (std::int64_t c = 0; c < C; ++c) {
      // y[c, t] = silu(sum_j w[c, j] x[c, t - (K-1) + j]), x before 0 being 0.
      double acc = 0.0;
      for (std::int64_t j = 0; j < K; ++j) {
        const std::int64_t src = t - (K - 1) + j;
        if (src >= 0) acc += static_cast<double>(w[j * C + c]) * x[src * C + c];
      }
      EXPECT_NEAR(out[t * C + c], silu(acc), 1e-6) << t << "," << c;
    }
  // The state now holds the last K-1 inputs, oldest first.
  for (std::int64_t j = 0; j < K - 1; ++j)
    for (std::int64_t c = 0; c < C; ++c) EXPECT_EQ(state[j * C + c], x[(m - (K - 1) + j) * C + c]);
}

TEST(Conv1dReference, StateCarriedAcrossCallsEqualsOneCall) {
  std::mt19937 rng(2);
  const ConvInputs in(rng, 9, 5, 4, 2);
  std::vector<float> s_all = in.zero_state(), all(in.x.size());
  reference_conv1d()->run(in.args(0, in.m, s_all.data(), all.data()));
  // 2 steps (shorter than the state), then 1, then 6.
  std::vector<float> s = in.zero_state(), parts(all.size());
  std::int64_t t = 0;
  for (std::int64_t len : {2, 1, 6}) {
    reference_conv1d()->run(in.args(t, len, s.data(), parts.data()));
    t += len;
  }
  for (std::size_t i = 0; i < all.size(); ++i) EXPECT_FLOAT_EQ(parts[i], all[i]) << i;
  EXPECT_EQ(s, s_all);
}

struct DeltaInputs {
  std::int64_t m, Hk, Hv, dk, dv;
  std::vector<float> q, k, v, g, beta, state;
  DeltaInputs(std::mt19937& rng, std::int64_t m_, std::int64_t hk, std::int64_t hv, std::int64_t dk_, std::int64_t dv_)
      : m(m_), Hk(hk), Hv(hv), dk(dk_), dv(dv_) {
    q = random_vec(rng, m * Hk * dk, -1, 1);
    k = random_vec(rng, m * Hk * dk, -1, 1);
    // l2-normalised keys, as the model passes them (the delta rule is stable for |k| <= 1).
    for (std::int64_t r = 0; r < m * Hk; ++r) {
      double n = 0.0;
      for (std::int64_t d = 0; d < dk; ++d) n += k[r * dk + d] * k[r * dk + d];
      for (std::int64_t d = 0; d < dk; ++d) k[r * dk + d] = static_cast<float>(k[r * dk + d] / std::sqrt(n));
    }
    v = random_vec(rng, m * Hv * dv, -1, 1);
    g = random_vec(rng, m * Hv, -0.3f, 0.0f);
    beta = random_vec(rng, m * Hv, 0.05f, 0.95f);
    state = random_vec(rng, Hv * dk * dv, -0.5f, 0.5f);
  }
  DeltaRuleArgs args(std::int64_t t0, std::int64_t len, float* st, float* out) const {
    return {q.data() + t0 * Hk * dk, k.data() + t0 * Hk * dk, v.data() + t0 * Hv * dv, g.data() + t0 * Hv,
            beta.data() + t0 * Hv,   st,                      out + t0 * Hv * dv,     len,
            Hk,                      Hv,                      dk,                     dv};
  }
};

TEST(DeltaRuleReference, OneStepFollowsTheRecurrence) {
  // dk = dv = 1: S' = e^g S + beta k (v - e^g S k); out = S' q.
  const float q = 0.7f, k = 0.6f, v = -1.3f, g = -0.25f, beta = 0.4f;
  float state = 2.0f, out = 0.0f;
  reference_delta_rule()->run({&q, &k, &v, &g, &beta, &state, &out, 1, 1, 1, 1, 1});
  const double decayed = std::exp(-0.25) * 2.0;
  const double expected = decayed + 0.4 * 0.6 * (-1.3 - decayed * 0.6);
  EXPECT_NEAR(state, expected, 1e-6);
  EXPECT_NEAR(out, expected * 0.7, 1e-6);
}

TEST(DeltaRuleReference, ValueHeadsShareTheirKeyHeadConsecutively) {
  // 2 key heads, 4 value heads: value heads 0 and 1 read key head 0, 2 and 3 key head 1
  // (repeat_interleave), not h % 2. Heads 1 and 2 get head 0's v, g and beta: head 1 must
  // reproduce head 0's output, head 2 (other keys) must not.
  std::mt19937 rng(3);
  DeltaInputs in(rng, 5, 2, 4, 4, 3);
  for (std::int64_t t = 0; t < in.m; ++t)
    for (std::int64_t h : {1, 2}) {
      for (std::int64_t e = 0; e < in.dv; ++e) in.v[(t * 4 + h) * in.dv + e] = in.v[(t * 4) * in.dv + e];
      in.g[t * 4 + h] = in.g[t * 4];
      in.beta[t * 4 + h] = in.beta[t * 4];
    }
  std::fill(in.state.begin(), in.state.end(), 0.0f);
  std::vector<float> out(in.m * 4 * in.dv);
  reference_delta_rule()->run(in.args(0, in.m, in.state.data(), out.data()));
  double other = 0.0;
  for (std::int64_t t = 0; t < in.m; ++t)
    for (std::int64_t e = 0; e < in.dv; ++e) {
      EXPECT_EQ(out[(t * 4 + 1) * in.dv + e], out[(t * 4) * in.dv + e]);
      other = std::max(other, static_cast<double>(std::abs(out[(t * 4 + 2) * in.dv + e] - out[(t * 4) * in.dv + e])));
    }
  EXPECT_GT(other, 1e-3);
}

TEST(DeltaRuleReference, ChunkedFormEqualsTheRecurrence) {
  std::mt19937 rng(4);
  // 150 steps: two full chunks of 64 and a remainder; 4 value heads on 2 key heads.
  DeltaInputs in(rng, 150, 2, 4, 8, 6);
  std::vector<float> s_rec = in.state, s_chunk = in.state;
  std::vector<float> rec(in.m * in.Hv * in.dv), chunk(rec.size());
  reference_delta_rule()->run(in.args(0, in.m, s_rec.data(), rec.data()));
  for (std::int64_t size : {64, 5, 1, 200}) {
    s_chunk = in.state;
    chunked_delta_rule_reference(in.args(0, in.m, s_chunk.data(), chunk.data()), size);
    ASSERT_TRUE(near(chunk, rec, 1e-5)) << "chunk " << size << " output";
    ASSERT_TRUE(near(s_chunk, s_rec, 1e-5)) << "chunk " << size << " state";
  }
}

TEST(DeltaRuleReference, StateCarriedAcrossCallsEqualsOneCall) {
  std::mt19937 rng(5);
  DeltaInputs in(rng, 40, 1, 3, 5, 4);
  std::vector<float> s_all = in.state, all(in.m * in.Hv * in.dv);
  reference_delta_rule()->run(in.args(0, in.m, s_all.data(), all.data()));
  std::vector<float> s = in.state, parts(all.size());
  std::int64_t t = 0;
  for (std::int64_t len : {1, 17, 1, 21}) {
    reference_delta_rule()->run(in.args(t, len, s.data(), parts.data()));
    t += len;
  }
  EXPECT_TRUE(near(parts, all, 1e-5));
}

TEST(DeltaRuleReference, RejectsValueHeadsNotAMultipleOfKeyHeads) {
  float x = 0.0f;
  EXPECT_THROW(reference_delta_rule()->run({&x, &x, &x, &x, &x, &x, &x, 1, 2, 3, 1, 1}), std::exception);
}


// Every SIMD backend this CPU runs equals the reference: odd channel counts and value dims (the
// vector tails), one decode step and long prefills, from a non-zero state, state included.
TEST(LinearAttentionBackends, MatchTheReference) {
  std::mt19937 rng(6);
  struct Shape {
    std::int64_t C, K, Hk, Hv, dk, dv;
  };
  for (const Backend& b : compiled_backends()) {
    const FamilyImpl& f = b.family(OpFamily::LinearAttention);
    if (!f.present() || !cpu_features().missing(b.needs).empty() || b.name == "reference") continue;
    SCOPED_TRACE(b.name);
    for (const Shape& sh : {Shape{37, 4, 1, 3, 5, 20}, Shape{256, 4, 2, 4, 32, 64}, Shape{96, 3, 2, 2, 16, 8}}) {
      for (std::int64_t m : {1, 9, 130}) {
        const ConvInputs c(rng, m, sh.C, sh.K, 2);
        const auto st0 = random_vec(rng, c.zero_state().size(), -1, 1);
        std::vector<float> s_ref = st0, s_fast = st0, o_ref(c.x.size()), o_fast(c.x.size());
        reference_conv1d()->run(c.args(0, m, s_ref.data(), o_ref.data()));
        f.conv1d->run(c.args(0, m, s_fast.data(), o_fast.data()));
        ASSERT_TRUE(near(o_fast, o_ref, 1e-5)) << "conv1d C " << sh.C << " m " << m;
        EXPECT_EQ(s_fast, s_ref);

        DeltaInputs in(rng, m, sh.Hk, sh.Hv, sh.dk, sh.dv);
        for (float& q : in.q) q /= std::sqrt(static_cast<float>(sh.dk));
        std::vector<float> d_ref = in.state, d_fast = in.state, r(static_cast<std::size_t>(m * sh.Hv * sh.dv)), fo(r.size());
        reference_delta_rule()->run(in.args(0, m, d_ref.data(), r.data()));
        f.delta_rule->run(in.args(0, m, d_fast.data(), fo.data()));
        ASSERT_TRUE(near(fo, r, 2e-5)) << "delta rule output, m " << m;
        ASSERT_TRUE(near(d_fast, d_ref, 2e-5)) << "delta rule state, m " << m;
      }
    }
  }
}

// The SIMD backends' generic halves take their exponentials from the vector tables (glibc's
// scalar expf was 1.4 % of a Qwen3.5-shaped prefill, docs/perf.md session 38): the conv's SiLU is
// silu_approx of the ISA core's pre-activations and the delta rule decays by exp_approx(g), bit for
// bit (every table returns exp_approx's bits, tests/kernels/vector_math_test.cpp).
TEST(LinearAttentionBackends, SimdWrappersTakeTheirExponentialsFromTheVectorTables) {
  struct Core {
    const char* backend;
    void (*conv)(const Conv1dArgs&);
    void (*delta)(const DeltaRuleArgs&, const float*);
  };
  std::mt19937 rng(11);
  int checked = 0;
  for (const Core& core : {Core{"avx2", avx2::conv1d, avx2::delta_rule}, Core{"avx512", avx512::conv1d, avx512::delta_rule}}) {
    const auto b = std::find_if(compiled_backends().begin(), compiled_backends().end(),
                                [&](const Backend& x) { return x.name == core.backend; });
    if (b == compiled_backends().end() || !cpu_features().missing(b->needs).empty()) continue;
    SCOPED_TRACE(core.backend);
    const FamilyImpl& f = b->family(OpFamily::LinearAttention);
    ASSERT_TRUE(f.present());
    ++checked;

    // Inputs up to |12| so the SiLU's exponentials span a wide range.
    const ConvInputs c(rng, 9, 96, 4, 12);
    const auto st0 = random_vec(rng, c.zero_state().size(), -12, 12);
    std::vector<float> s_pre = st0, s_out = st0, pre(c.x.size()), out(c.x.size());
    core.conv(c.args(0, c.m, s_pre.data(), pre.data()));
    f.conv1d->run(c.args(0, c.m, s_out.data(), out.data()));
    for (std::size_t i = 0; i < pre.size(); ++i) ASSERT_EQ(out[i], silu_approx(pre[i])) << "conv element " << i << ", pre " << pre[i];

    DeltaInputs in(rng, 3, 2, 4, 16, 32);
    std::vector<float> decay(in.g.size());
    for (std::size_t i = 0; i < decay.size(); ++i) decay[i] = exp_approx(in.g[i]);
    std::vector<float> d_core = in.state, d_kernel = in.state, o_core(static_cast<std::size_t>(in.m * in.Hv * in.dv)), o_kernel(o_core.size());
    core.delta(in.args(0, in.m, d_core.data(), o_core.data()), decay.data());
    f.delta_rule->run(in.args(0, in.m, d_kernel.data(), o_kernel.data()));
    EXPECT_EQ(o_kernel, o_core);
    EXPECT_EQ(d_kernel, d_core);
  }
  if (checked == 0) GTEST_SKIP() << "no AVX2 or AVX-512 backend runs on this CPU";
}

// Validation on a hybrid model's shapes selects a linear-attention backend and fills the kernel set.
TEST(LinearAttentionBackends, SelectedForAHybridModel) {
  ModelConfig c;
  c.arch = Arch::Qwen3_5Moe;
  c.hidden_size = 64;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 32;
  c.vocab_size = 256;
  c.layer_types = {LayerType::LinearAttention, LayerType::LinearAttention, LayerType::LinearAttention,
                   LayerType::FullAttention};
  c.linear_conv_kernel_dim = 4;
  c.linear_key_head_dim = 128;
  c.linear_value_head_dim = 128;
  c.linear_num_key_heads = 4;
  c.linear_num_value_heads = 8;
  BackendOptions o;
  o.seed = 5;
  o.validate_all = true;
  const ShapeSet shapes = shapes_for_model(c, ResolvedQuantization{});
  ASSERT_EQ(shapes.linear_attention.size(), 1u);
  EXPECT_EQ(shapes.linear_attention[0].conv_channels, 2 * 4 * 128 + 8 * 128);
  auto sel = select_kernels(o, shapes);
  const SelectionReport r = sel->report();
  const FamilyReport& fam = r.family(OpFamily::LinearAttention);
  EXPECT_FALSE(fam.chosen.empty());
  for (const Verdict& v : fam.verdicts)
    if (v.status != VerdictStatus::Unsupported) {
      EXPECT_EQ(v.status, VerdictStatus::Passed) << v.backend << ": " << v.reason;
    }
  EXPECT_NE(sel->kernels().conv1d, nullptr);
  EXPECT_NE(sel->kernels().delta_rule, nullptr);
}

}  // namespace
}  // namespace fp4serve::kernels
