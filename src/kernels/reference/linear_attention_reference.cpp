// Reference linear-attention ops (Gated DeltaNet): the causal depthwise conv1d + SiLU and the
// gated delta rule, as plain loops accumulating in fp64. The delta rule's reference is the
// recurrence itself, one step at a time with the state held in fp64 for the whole call; the
// chunked form transformers uses for prefill is here too, so tests can show both agree.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/kernels.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels {

namespace {

double silu(double v) { return v / (1.0 + std::exp(-v)); }

void check(const DeltaRuleArgs& a) {
  if (a.m < 0 || a.num_k_heads <= 0 || a.num_v_heads <= 0 || a.dk <= 0 || a.dv <= 0 ||
      a.num_v_heads % a.num_k_heads != 0)
    fail("gated delta rule: invalid shape (m ", a.m, ", ", a.num_k_heads, " key heads, ", a.num_v_heads,
         " value heads, dk ", a.dk, ", dv ", a.dv, ")");
}

class ReferenceConv1d final : public Conv1dKernel {
 public:
  void run(const Conv1dArgs& a) const override {
    if (a.kernel < 1 || a.channels < 0 || a.m < 0) fail("conv1d: invalid shape (kernel ", a.kernel, ")");
    const std::int64_t C = a.channels, K = a.kernel, S = K - 1, m = a.m;
    parallel_for(C, 64, [&](std::int64_t c0, std::int64_t c1) {
      std::vector<float> window(static_cast<std::size_t>(S + m));  // x' of one channel: state then x
      for (std::int64_t c = c0; c < c1; ++c) {
        for (std::int64_t j = 0; j < S; ++j) window[static_cast<std::size_t>(j)] = a.state[j * C + c];
        for (std::int64_t t = 0; t < m; ++t) window[static_cast<std::size_t>(S + t)] = a.x[t * C + c];
        for (std::int64_t t = 0; t < m; ++t) {
          double acc = 0.0;
          for (std::int64_t j = 0; j < K; ++j)
            acc += static_cast<double>(a.weight[j * C + c]) * window[static_cast<std::size_t>(t + j)];
          a.out[t * C + c] = static_cast<float>(silu(acc));
        }
        for (std::int64_t j = 0; j < S; ++j) a.state[j * C + c] = window[static_cast<std::size_t>(m + j)];
      }
    });
  }
};

class ReferenceDeltaRule final : public DeltaRuleKernel {
 public:
  void run(const DeltaRuleArgs& a) const override {
    check(a);
    const std::int64_t dk = a.dk, dv = a.dv, Hk = a.num_k_heads, Hv = a.num_v_heads, r = Hv / Hk;
    parallel_for(Hv, 1, [&](std::int64_t h0, std::int64_t h1) {
      std::vector<double> S(static_cast<std::size_t>(dk * dv)), mem(static_cast<std::size_t>(dv));
      for (std::int64_t h = h0; h < h1; ++h) {
        float* state = a.state + h * dk * dv;
        for (std::int64_t i = 0; i < dk * dv; ++i) S[static_cast<std::size_t>(i)] = state[i];
        const std::int64_t kh = h / r;
        for (std::int64_t t = 0; t < a.m; ++t) {
          const float* q = a.q + (t * Hk + kh) * dk;
          const float* k = a.k + (t * Hk + kh) * dk;
          const float* v = a.v + (t * Hv + h) * dv;
          const double decay = std::exp(static_cast<double>(a.g[t * Hv + h]));
          const double beta = a.beta[t * Hv + h];
          for (double& s : S) s *= decay;
          std::fill(mem.begin(), mem.end(), 0.0);
          for (std::int64_t i = 0; i < dk; ++i)
            for (std::int64_t j = 0; j < dv; ++j) mem[static_cast<std::size_t>(j)] += S[static_cast<std::size_t>(i * dv + j)] * k[i];
          for (std::int64_t j = 0; j < dv; ++j) mem[static_cast<std::size_t>(j)] = (v[j] - mem[static_cast<std::size_t>(j)]) * beta;
          for (std::int64_t i = 0; i < dk; ++i)
            for (std::int64_t j = 0; j < dv; ++j) S[static_cast<std::size_t>(i * dv + j)] += k[i] * mem[static_cast<std::size_t>(j)];
          float* out = a.out + (t * Hv + h) * dv;
          for (std::int64_t j = 0; j < dv; ++j) {
            double acc = 0.0;
            for (std::int64_t i = 0; i < dk; ++i) acc += S[static_cast<std::size_t>(i * dv + j)] * q[i];
            out[j] = static_cast<float>(acc);
          }
        }
        for (std::int64_t i = 0; i < dk * dv; ++i) state[i] = static_cast<float>(S[static_cast<std::size_t>(i)]);
      }
    });
  }
};

}  // namespace

const Conv1dKernel* reference_conv1d() {
  static const ReferenceConv1d k;
  return &k;
}

const DeltaRuleKernel* reference_delta_rule() {
  static const ReferenceDeltaRule k;
  return &k;
}

// torch_chunk_gated_delta_rule per value head, in fp64. Within a chunk of L steps with
// cumulative log decay G_i = g_0 + ... + g_i:
//   T = I + strictly_lower[(beta_i k_i . k_j) e^{G_i - G_j}]      (the UT system)
//   U = T^-1 (beta v),  W = T^-1 (beta k e^{G})                     (forward substitution)
//   V' = U - W S;  out = (q e^{G}) S + lower_incl[(q_i . k_j) e^{G_i - G_j}] V'
//   S <- e^{G_{L-1}} S + (k e^{G_{L-1} - G})^T V'
void chunked_delta_rule_reference(const DeltaRuleArgs& a, std::int64_t chunk) {
  check(a);
  if (chunk < 1) fail("gated delta rule: chunk size ", chunk, " must be positive");
  const std::int64_t dk = a.dk, dv = a.dv, Hk = a.num_k_heads, Hv = a.num_v_heads, r = Hv / Hk;
  auto at = [](std::vector<double>& v, std::int64_t i) -> double& { return v[static_cast<std::size_t>(i)]; };
  for (std::int64_t h = 0; h < Hv; ++h) {
    const std::int64_t kh = h / r;
    std::vector<double> S(static_cast<std::size_t>(dk * dv));
    float* state = a.state + h * dk * dv;
    for (std::int64_t i = 0; i < dk * dv; ++i) at(S, i) = state[i];
    for (std::int64_t c0 = 0; c0 < a.m; c0 += chunk) {
      const std::int64_t L = std::min(chunk, a.m - c0);
      auto q = [&](std::int64_t i, std::int64_t d) { return static_cast<double>(a.q[((c0 + i) * Hk + kh) * dk + d]); };
      auto k = [&](std::int64_t i, std::int64_t d) { return static_cast<double>(a.k[((c0 + i) * Hk + kh) * dk + d]); };
      auto v = [&](std::int64_t i, std::int64_t d) { return static_cast<double>(a.v[((c0 + i) * Hv + h) * dv + d]); };
      auto beta = [&](std::int64_t i) { return static_cast<double>(a.beta[(c0 + i) * Hv + h]); };
      std::vector<double> G(static_cast<std::size_t>(L));
      double acc = 0.0;
      for (std::int64_t i = 0; i < L; ++i) at(G, i) = acc += a.g[(c0 + i) * Hv + h];
      auto kk = [&](std::int64_t i, std::int64_t j) {
        double s = 0.0;
        for (std::int64_t d = 0; d < dk; ++d) s += k(i, d) * k(j, d);
        return s;
      };
      // U [L, dv] and W [L, dk] by forward substitution through T.
      std::vector<double> U(static_cast<std::size_t>(L * dv)), W(static_cast<std::size_t>(L * dk));
      for (std::int64_t i = 0; i < L; ++i) {
        for (std::int64_t d = 0; d < dv; ++d) at(U, i * dv + d) = beta(i) * v(i, d);
        for (std::int64_t d = 0; d < dk; ++d) at(W, i * dk + d) = beta(i) * k(i, d) * std::exp(at(G, i));
        for (std::int64_t j = 0; j < i; ++j) {
          const double t_ij = beta(i) * kk(i, j) * std::exp(at(G, i) - at(G, j));
          for (std::int64_t d = 0; d < dv; ++d) at(U, i * dv + d) -= t_ij * at(U, j * dv + d);
          for (std::int64_t d = 0; d < dk; ++d) at(W, i * dk + d) -= t_ij * at(W, j * dk + d);
        }
      }
      // V' = U - W S.
      std::vector<double> Vn(U);
      for (std::int64_t i = 0; i < L; ++i)
        for (std::int64_t d = 0; d < dk; ++d)
          for (std::int64_t e = 0; e < dv; ++e) at(Vn, i * dv + e) -= at(W, i * dk + d) * at(S, d * dv + e);
      for (std::int64_t i = 0; i < L; ++i) {
        float* out = a.out + ((c0 + i) * Hv + h) * dv;
        std::vector<double> o(static_cast<std::size_t>(dv), 0.0);
        const double gi = std::exp(at(G, i));
        for (std::int64_t d = 0; d < dk; ++d)
          for (std::int64_t e = 0; e < dv; ++e) at(o, e) += q(i, d) * gi * at(S, d * dv + e);
        for (std::int64_t j = 0; j <= i; ++j) {
          double qk = 0.0;
          for (std::int64_t d = 0; d < dk; ++d) qk += q(i, d) * k(j, d);
          qk *= std::exp(at(G, i) - at(G, j));
          for (std::int64_t e = 0; e < dv; ++e) at(o, e) += qk * at(Vn, j * dv + e);
        }
        for (std::int64_t e = 0; e < dv; ++e) out[e] = static_cast<float>(at(o, e));
      }
      const double g_last = at(G, L - 1);
      for (double& s : S) s *= std::exp(g_last);
      for (std::int64_t j = 0; j < L; ++j) {
        const double w = std::exp(g_last - at(G, j));
        for (std::int64_t d = 0; d < dk; ++d)
          for (std::int64_t e = 0; e < dv; ++e) at(S, d * dv + e) += k(j, d) * w * at(Vn, j * dv + e);
      }
    }
    for (std::int64_t i = 0; i < dk * dv; ++i) state[i] = static_cast<float>(at(S, i));
  }
}

}  // namespace fp4serve::kernels
