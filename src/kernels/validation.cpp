#include "kernels/validation.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <sstream>

#include "kernels/faults.h"
#include "kernels/paged_kv.h"
#include "kernels/random_data.h"

namespace fp4serve::kernels {

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Outputs start as quiet NaN (an unwritten element fails as non-finite); fences on both sides
// hold a NaN with a distinctive payload that a correct kernel never produces, compared bitwise.
constexpr std::uint32_t kPoison = 0x7FC00000u;
constexpr std::uint32_t kFence = 0xFFBADBADu;
constexpr std::size_t kFenceWords = 16;

struct Fenced {
  std::vector<std::uint32_t> words;
  float* out(std::size_t) { return reinterpret_cast<float*>(words.data() + kFenceWords); }
  void reset(std::size_t n) {
    words.assign(n + 2 * kFenceWords, kPoison);
    std::fill(words.begin(), words.begin() + kFenceWords, kFence);
    std::fill(words.end() - kFenceWords, words.end(), kFence);
  }
  bool fences_intact() const {
    for (std::size_t i = 0; i < kFenceWords; ++i)
      if (words[i] != kFence || words[words.size() - 1 - i] != kFence) return false;
    return true;
  }
};

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(3);
  os << v;
  return os.str();
}

struct GemmData {
  GemmShape shape;
  std::unique_ptr<OwnedWeight> w;
  struct Case {
    std::int64_t m;
    std::vector<float> x, ref;
  };
  std::vector<Case> cases;
};

struct MoeData {
  MoeShape shape;
  std::unique_ptr<OwnedMoe> moe;
  std::unique_ptr<OwnedWeight> hot;
  MoeLayer hot_layer;
  struct Case {
    std::int64_t m;
    bool hot;
    std::vector<float> x, ref;
  };
  std::vector<Case> cases;
};

struct AttentionData {
  AttentionShape shape;
  struct Case {
    std::int64_t m, past;
    std::vector<float> q, k, v, ref;
    std::shared_ptr<PagedKvCopy> paged;  // k and v in shuffled blocks, as the engine pages them
  };
  std::vector<Case> cases;
};

struct LinearAttentionData {
  LinearAttentionShape shape;
  std::vector<float> conv_weight;  // [kernel, channels]
  struct Case {
    std::int64_t m;
    std::vector<float> x, conv_state;             // conv1d input and initial state
    std::vector<float> q, k, v, g, beta, state;   // delta rule inputs and initial state
    std::vector<float> conv_ref, delta_ref;       // reference [output rows | final state rows]
  };
  std::vector<Case> cases;
};

// Inputs as the model passes them: q and k l2-normalised (q also scaled by dk^-0.5), log decay
// in [-1, 0], beta in (0, 1).
void normalise_rows(std::vector<float>& x, std::int64_t dim, float scale) {
  for (std::size_t r = 0; r + static_cast<std::size_t>(dim) <= x.size(); r += static_cast<std::size_t>(dim)) {
    double n = 0.0;
    for (std::int64_t i = 0; i < dim; ++i) n += static_cast<double>(x[r + i]) * x[r + i];
    const auto inv = static_cast<float>(1.0 / std::sqrt(n + 1e-6));
    for (std::int64_t i = 0; i < dim; ++i) x[r + i] = x[r + i] * inv * scale;
  }
}

// Runs the conv kernel on a case, writing [out (m rows) | final state (kernel-1 rows)] to y.
void run_conv(const Conv1dKernel& k, const LinearAttentionData& d, const LinearAttentionData::Case& c, float* y) {
  const LinearAttentionShape& s = d.shape;
  float* state = y + c.m * s.conv_channels;
  std::copy(c.conv_state.begin(), c.conv_state.end(), state);
  k.run({c.x.data(), y, state, d.conv_weight.data(), c.m, s.conv_channels, s.conv_kernel});
}

// Runs the delta rule on a case, writing [out (m * value_heads rows) | final state] to y.
void run_delta(const DeltaRuleKernel& k, const LinearAttentionData& d, const LinearAttentionData::Case& c, float* y) {
  const LinearAttentionShape& s = d.shape;
  float* state = y + c.m * s.value_heads * s.value_dim;
  std::copy(c.state.begin(), c.state.end(), state);
  k.run({c.q.data(), c.k.data(), c.v.data(), c.g.data(), c.beta.data(), state, y, c.m, s.key_heads, s.value_heads,
         s.key_dim, s.value_dim});
}

// Small enough that every validation case spans several blocks, one of them partly filled.
constexpr std::int64_t kValidationBlockTokens = 16;

AttentionArgs attention_args(const AttentionData::Case& c, const AttentionShape& s, float* out) {
  AttentionArgs a;
  a.q = c.q.data();
  a.out = out;
  c.paged->point(a);
  a.m = c.m;
  a.past = c.past;
  a.num_heads = s.heads;
  a.num_kv_heads = s.kv_heads;
  a.head_dim = s.head_dim;
  a.scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  return a;
}

// Top-k boundaries closer than this (in logits) are re-drawn: the fp32 router of a fast backend
// and the fp64 reference may order such a pair differently, which is not a kernel bug.
constexpr float kMinRoutingGap = 1e-3f;

bool routing_is_decisive(const float* logits, std::int64_t experts, std::int64_t k) {
  if (k >= experts) return true;
  std::vector<float> l(logits, logits + experts);
  std::nth_element(l.begin(), l.begin() + (k - 1), l.end(), std::greater<float>());
  const float kth = l[static_cast<std::size_t>(k - 1)];
  const float next = *std::max_element(l.begin() + k, l.end());
  return kth - next >= kMinRoutingGap * (1.0f + std::fabs(kth));
}

}  // namespace

double validation_tolerance(Precision precision) {
  switch (precision) {
    case Precision::Fp32:
    case Precision::Activations16:      // as fp32: bf16 hi + lo pairs measure 2.5-7e-6
    case Precision::Int8x3Activations: return 1e-4;  // as fp32
    case Precision::Bf16Activations: return 2e-2;
    case Precision::Int8Activations: return 5e-2;  // per-block int8: 0.5-3 % measured (session 7), bugs >= 0.3
  }
  return 0.0;
}

struct FamilyValidator::Impl {
  OpFamily family;
  ShapeSet shapes;
  std::uint64_t seed;
  bool built = false;
  double ref_seconds = 0.0;
  std::vector<GemmData> gemm;
  std::vector<MoeData> moe;
  std::vector<AttentionData> attention;
  std::vector<LinearAttentionData> linear;

  const std::vector<GemmShape>& gemm_shapes() const { return family == OpFamily::Fp4Gemm ? shapes.fp4 : shapes.dense; }

  void build() {
    if (built) return;
    built = true;
    const auto t0 = Clock::now();
    Rng rng(seed);
    const KernelSet ref = reference_kernels();
    if (family == OpFamily::Fp4Gemm || family == OpFamily::DenseGemm) {
      const GemmKernel* rk = family == OpFamily::Fp4Gemm ? ref.fp4_gemm : ref.dense_gemm;
      for (const GemmShape& s : gemm_shapes()) {
        GemmData d;
        d.shape = s;
        d.w = random_weight(rng, s.kind, s.dtype, s.n, s.k);
        // Every case's rows in one reference call: each output row is its own dot products, so
        // the same numbers as one call per case, with each weight row dequantized once.
        std::vector<float> xs;
        for (std::int64_t m : kGemmValidationM) {
          GemmData::Case c{m, random_activations(rng, m, s.k), {}};
          xs.insert(xs.end(), c.x.begin(), c.x.end());
          d.cases.push_back(std::move(c));
        }
        const auto rows = static_cast<std::int64_t>(xs.size()) / s.k;
        std::vector<float> ys(static_cast<std::size_t>(rows * s.n));
        rk->run(xs.data(), rows, d.w->w, ys.data(), shapes.semantics);
        std::size_t at = 0;
        for (GemmData::Case& c : d.cases) {
          const auto count = static_cast<std::size_t>(c.m * s.n);
          c.ref.assign(ys.begin() + static_cast<std::ptrdiff_t>(at), ys.begin() + static_cast<std::ptrdiff_t>(at + count));
          at += count;
        }
        gemm.push_back(std::move(d));
      }
    } else if (family == OpFamily::Moe) {
      for (const MoeShape& s : shapes.moe) {
        MoeData d;
        d.shape = s;
        d.moe = random_moe(rng, s, kMoeValidationBytes);
        const std::vector<float> bias = random_activations(rng, 1, s.hidden);
        const bool can_hot = s.router_kind == SchemeKind::Dense;
        if (can_hot) {
          d.hot = hot_router(rng, s, s.top_k, bias);
          d.hot_layer = d.moe->layer;
          d.hot_layer.router = d.hot->w;
        }
        for (std::size_t i = 0; i < std::size(kMoeValidationM); ++i) {
          const std::int64_t m = kMoeValidationM[i];
          const bool hot = can_hot && i + 1 == std::size(kMoeValidationM);
          const MoeLayer& layer = hot ? d.hot_layer : d.moe->layer;
          MoeData::Case c{m, hot, {}, {}};
          c.x.resize(static_cast<std::size_t>(m * s.hidden));
          std::vector<float> logits(static_cast<std::size_t>(s.experts));
          const GemmKernel* router = layer.router.kind == SchemeKind::NVFP4 ? ref.fp4_gemm : ref.dense_gemm;
          for (std::int64_t t = 0; t < m; ++t) {
            float* xt = c.x.data() + t * s.hidden;
            for (int attempt = 0; attempt < 50; ++attempt) {
              for (std::int64_t j = 0; j < s.hidden; ++j)
                xt[j] = hot ? bias[static_cast<std::size_t>(j)] + rng.uniform(-0.5f, 0.5f) : rng.uniform(-1.0f, 1.0f);
              router->run(xt, 1, layer.router, logits.data(), shapes.semantics);
              if (routing_is_decisive(logits.data(), s.experts, s.top_k)) break;
            }
          }
          c.ref.resize(c.x.size());
          ref.moe->run(c.x.data(), m, layer, c.ref.data(), shapes.semantics);
          d.cases.push_back(std::move(c));
        }
        moe.push_back(std::move(d));
      }
    } else if (family == OpFamily::LinearAttention) {
      for (const LinearAttentionShape& s : shapes.linear_attention) {
        LinearAttentionData d;
        d.shape = s;
        d.conv_weight = random_activations(rng, s.conv_kernel, s.conv_channels);
        const std::int64_t qk = s.key_heads * s.key_dim, vd = s.value_heads * s.value_dim;
        for (std::int64_t m : kLinearAttentionValidationM) {
          LinearAttentionData::Case c;
          c.m = m;
          c.x = random_activations(rng, m, s.conv_channels);
          c.conv_state = random_activations(rng, s.conv_kernel - 1, s.conv_channels);
          c.q = random_activations(rng, m, qk);
          c.k = random_activations(rng, m, qk);
          normalise_rows(c.q, s.key_dim, 1.0f / std::sqrt(static_cast<float>(s.key_dim)));
          normalise_rows(c.k, s.key_dim, 1.0f);
          c.v = random_activations(rng, m, vd);
          c.g.resize(static_cast<std::size_t>(m * s.value_heads));
          c.beta.resize(c.g.size());
          for (float& g : c.g) g = rng.uniform(-1.0f, 0.0f);
          for (float& b : c.beta) b = rng.uniform(0.05f, 0.95f);
          c.state = random_activations(rng, s.value_heads * s.key_dim, s.value_dim);
          c.conv_ref.resize(static_cast<std::size_t>((m + s.conv_kernel - 1) * s.conv_channels));
          c.delta_ref.resize(static_cast<std::size_t>(m * vd) + c.state.size());
          run_conv(*ref.conv1d, d, c, c.conv_ref.data());
          run_delta(*ref.delta_rule, d, c, c.delta_ref.data());
          d.cases.push_back(std::move(c));
        }
        linear.push_back(std::move(d));
      }
    } else {
      for (const AttentionShape& s : shapes.attention) {
        AttentionData d;
        d.shape = s;
        for (const auto& cs : kAttentionValidation) {
          AttentionData::Case c{cs.m, cs.past, {}, {}, {}, {}, nullptr};
          c.q = random_activations(rng, cs.m, s.heads * s.head_dim);
          c.k = random_activations(rng, cs.past + cs.m, s.kv_heads * s.head_dim);
          c.v = random_activations(rng, cs.past + cs.m, s.kv_heads * s.head_dim);
          c.ref.resize(c.q.size());
          c.paged = std::make_shared<PagedKvCopy>(c.k.data(), c.v.data(), cs.past + cs.m, s.kv_heads, s.head_dim,
                                                  kValidationBlockTokens, 3, 1, 1, s.kv_dtype);
          ref.attention->run(attention_args(c, s, c.ref.data()));
          d.cases.push_back(std::move(c));
        }
        attention.push_back(std::move(d));
      }
    }
    ref_seconds = since(t0);
  }
};

FamilyValidator::FamilyValidator(OpFamily family, const ShapeSet& shapes, std::uint64_t seed)
    : impl_(std::make_unique<Impl>()) {
  impl_->family = family;
  impl_->shapes = shapes;
  impl_->seed = seed;
}

FamilyValidator::~FamilyValidator() = default;

bool FamilyValidator::empty() const {
  switch (impl_->family) {
    case OpFamily::Fp4Gemm:
    case OpFamily::DenseGemm: return impl_->gemm_shapes().empty();
    case OpFamily::Moe: return impl_->shapes.moe.empty();
    case OpFamily::Attention: return impl_->shapes.attention.empty();
    case OpFamily::LinearAttention: return impl_->shapes.linear_attention.empty();
  }
  return true;
}

std::vector<std::string> FamilyValidator::shape_descriptions() const {
  std::vector<std::string> out;
  switch (impl_->family) {
    case OpFamily::Fp4Gemm:
    case OpFamily::DenseGemm:
      for (const auto& s : impl_->gemm_shapes()) out.push_back(describe(s));
      break;
    case OpFamily::Moe:
      for (const auto& s : impl_->shapes.moe) out.push_back(describe(s));
      break;
    case OpFamily::Attention:
      for (const auto& s : impl_->shapes.attention) out.push_back(describe(s));
      break;
    case OpFamily::LinearAttention:
      for (const auto& s : impl_->shapes.linear_attention) out.push_back(describe(s));
      break;
  }
  return out;
}

std::vector<std::string> FamilyValidator::case_descriptions() const {
  std::vector<std::string> out;
  switch (impl_->family) {
    case OpFamily::Fp4Gemm:
    case OpFamily::DenseGemm:
      for (std::int64_t m : kGemmValidationM) out.push_back("M=" + std::to_string(m));
      break;
    case OpFamily::Moe:
      for (std::size_t i = 0; i < std::size(kMoeValidationM); ++i)
        out.push_back("M=" + std::to_string(kMoeValidationM[i]) + (i + 1 == std::size(kMoeValidationM) ? " (hot router)" : ""));
      break;
    case OpFamily::Attention:
      for (const auto& c : kAttentionValidation) out.push_back("M=" + std::to_string(c.m) + " past=" + std::to_string(c.past));
      break;
    case OpFamily::LinearAttention:
      for (std::int64_t m : kLinearAttentionValidationM) out.push_back("M=" + std::to_string(m) + " from a non-zero state");
      break;
  }
  return out;
}

std::string FamilyValidator::unsupported(const FamilyImpl& impl) const {
  switch (impl_->family) {
    case OpFamily::Fp4Gemm:
    case OpFamily::DenseGemm:
      for (const auto& s : impl_->gemm_shapes())
        if (impl.gemm_unsupported)
          if (auto why = impl.gemm_unsupported(s); !why.empty()) return describe(s) + ": " + why;
      break;
    case OpFamily::Moe:
      for (const auto& s : impl_->shapes.moe)
        if (impl.moe_unsupported)
          if (auto why = impl.moe_unsupported(s); !why.empty()) return describe(s) + ": " + why;
      break;
    case OpFamily::Attention:
      for (const auto& s : impl_->shapes.attention)
        if (impl.attention_unsupported)
          if (auto why = impl.attention_unsupported(s); !why.empty()) return describe(s) + ": " + why;
      break;
    case OpFamily::LinearAttention:
      for (const auto& s : impl_->shapes.linear_attention)
        if (impl.linear_unsupported)
          if (auto why = impl.linear_unsupported(s); !why.empty()) return describe(s) + ": " + why;
      break;
  }
  return {};
}

double FamilyValidator::reference_seconds() const { return impl_->ref_seconds; }

void FamilyValidator::validate(const FamilyImpl& fi, Verdict& v) {
  impl_->build();
  v.tolerance = validation_tolerance(fi.precision);
  v.precision = std::string(precision_name(fi.precision));
  v.error = 0.0;
  v.seconds = 0.0;
  v.reason.clear();
  ValidationScope scope;
  Fenced buf;

  // Runs one case; returns false (and fills the verdict) on failure.
  auto check = [&](const std::string& what, std::size_t count, std::int64_t rows, const std::vector<float>& ref, auto&& call) {
    buf.reset(count);
    const auto t0 = Clock::now();
    try {
      call(buf.out(count));
    } catch (const std::exception& e) {
      v.seconds += since(t0);
      v.error = INFINITY;
      v.reason = what + ": threw: " + e.what();
      return false;
    }
    v.seconds += since(t0);
    if (!buf.fences_intact()) {
      v.error = INFINITY;
      v.reason = what + ": wrote outside its output buffer";
      return false;
    }
    const float* out = buf.out(count);
    const std::int64_t cols = rows > 0 ? static_cast<std::int64_t>(count) / rows : 0;
    const double err = output_error(out, ref.data(), rows, cols);
    v.error = std::max(v.error, err);
    if (std::isinf(err)) {
      std::size_t i = 0;
      while (i < count && std::isfinite(out[i])) ++i;
      v.reason = what + ": non-finite output at row " + std::to_string(i / static_cast<std::size_t>(std::max<std::int64_t>(cols, 1))) +
                 ", column " + std::to_string(i % static_cast<std::size_t>(std::max<std::int64_t>(cols, 1))) +
                 " (NaN/Inf computed, or left unwritten)";
      return false;
    }
    if (!(err <= v.tolerance)) {
      v.reason = what + ": error " + fmt(err) + " > tolerance " + fmt(v.tolerance);
      return false;
    }
    return true;
  };

  bool ok = true;
  const Fp4Semantics sem = impl_->shapes.semantics;
  for (auto& d : impl_->gemm)
    for (auto& c : d.cases) {
      if (!ok) break;
      ok = check(describe(d.shape) + " M=" + std::to_string(c.m), c.ref.size(), c.m, c.ref,
                 [&](float* y) { fi.gemm->run(c.x.data(), c.m, d.w->w, y, sem); });
    }
  for (auto& d : impl_->moe)
    for (auto& c : d.cases) {
      if (!ok) break;
      const MoeLayer& layer = c.hot ? d.hot_layer : d.moe->layer;
      ok = check(describe(d.shape) + " M=" + std::to_string(c.m) + (c.hot ? " (hot router)" : ""), c.ref.size(), c.m, c.ref,
                 [&](float* y) { fi.moe->run(c.x.data(), c.m, layer, y, sem); });
    }
  for (auto& d : impl_->attention)
    for (auto& c : d.cases) {
      if (!ok) break;
      const AttentionShape& s = d.shape;
      ok = check(describe(s) + " M=" + std::to_string(c.m) + " past=" + std::to_string(c.past), c.ref.size(), c.m, c.ref,
                 [&](float* out) {
                   fi.attention->run(attention_args(c, s, out));
                 });
    }
  // Linear attention: the output rows and the final state both count (a kernel that gets the
  // state wrong breaks every later step).
  for (auto& d : impl_->linear)
    for (auto& c : d.cases) {
      const LinearAttentionShape& s = d.shape;
      const std::string at = describe(s) + " M=" + std::to_string(c.m);
      if (ok)
        ok = check("conv1d of " + at, c.conv_ref.size(), c.m + s.conv_kernel - 1, c.conv_ref,
                   [&](float* y) { run_conv(*fi.conv1d, d, c, y); });
      if (ok)
        ok = check("delta rule of " + at, c.delta_ref.size(), c.m * s.value_heads + s.value_heads * s.key_dim, c.delta_ref,
                   [&](float* y) { run_delta(*fi.delta_rule, d, c, y); });
    }
  v.status = ok ? VerdictStatus::Passed : VerdictStatus::Failed;
}

}  // namespace fp4serve::kernels
