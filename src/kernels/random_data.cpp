#include "kernels/random_data.h"

#include <cmath>
#include <algorithm>
#include <array>
#include <cstring>

#include "numerics/scalar_formats.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels {

namespace {

std::uint64_t splitmix(std::uint64_t& x) {
  std::uint64_t z = (x += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

std::uint64_t rotl(std::uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

// A typical NVFP4 block scale: E4M3 with exponent field 4..10 (2^-3 .. 2^3), any mantissa.
std::uint8_t typical_scale(Rng& rng) {
  return static_cast<std::uint8_t>(((4 + rng.below(7)) << 3) | rng.below(8));
}

// Rare-but-legal scales every kernel must get right: the E4M3 maximum (448, the value behind a
// published NaN bug), the smallest subnormal (ModelOpt's 2^-9 clamp), zero, min normal, negative.
constexpr std::uint8_t kSpecialScales[] = {0x7E, 0x01, 0x00, 0x08, 0xB8, 0x06};

}  // namespace

Rng::Rng(std::uint64_t seed) {
  for (auto& s : s_) s = splitmix(seed);
}

std::uint64_t Rng::next() {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

float Rng::uniform(float lo, float hi) {
  return lo + (hi - lo) * static_cast<float>(next() >> 40) * (1.0f / 16777216.0f);
}

std::uint32_t Rng::below(std::uint32_t n) { return static_cast<std::uint32_t>((next() >> 32) % n); }

std::vector<float> random_activations(Rng& rng, std::int64_t m, std::int64_t k, float amplitude) {
  std::vector<float> x(static_cast<std::size_t>(m * k));
  for (float& v : x) v = rng.uniform(-amplitude, amplitude);
  return x;
}

std::unique_ptr<OwnedWeight> random_weight(Rng& rng, SchemeKind kind, DType dtype, std::int64_t n, std::int64_t k) {
  auto o = std::make_unique<OwnedWeight>();
  WeightMatrix& w = o->w;
  w.kind = kind;
  w.dtype = dtype;
  w.n = n;
  w.k = k;
  const auto nk = static_cast<std::size_t>(n * k);
  switch (kind) {
    case SchemeKind::NVFP4: {
      if (k % 16 != 0) fail("random_weight: NVFP4 k = ", k, " is not a multiple of 16");
      w.dtype = DType::U8;
      o->data.resize(nk / 2);
      for (std::size_t i = 0; i < o->data.size(); i += 8) {
        const std::uint64_t r = rng.next();
        std::memcpy(o->data.data() + i, &r, std::min<std::size_t>(8, o->data.size() - i));
      }
      o->scales.resize(nk / 16);
      const std::int64_t blocks = k / 16;
      for (std::int64_t r = 0; r < n; ++r) {
        for (std::int64_t b = 0; b < blocks; ++b) o->scales[r * blocks + b] = typical_scale(rng);
        if (r % 7 == 3) o->scales[r * blocks + rng.below(static_cast<std::uint32_t>(blocks))] = kSpecialScales[(r / 7) % 6];
      }
      w.weight_scale_2 = rng.uniform(0.5f, 2.0f) / 2688.0f;
      w.input_scale = 1.0f / 2688.0f;  // global 2688: activations of amplitude ~1 use the E4M3 range
      w.block_scales = o->scales.data();
      break;
    }
    case SchemeKind::FP8: {
      w.dtype = DType::F8_E4M3;
      o->data.resize(nk);
      // Sign, exponent field 4..11, any mantissa: no NaN codes, a realistic spread.
      for (auto& b : o->data) b = static_cast<std::uint8_t>((rng.below(2) << 7) | ((4 + rng.below(8)) << 3) | rng.below(8));
      w.weight_scale_2 = rng.uniform(0.5f, 2.0f) / 448.0f;
      w.input_scale = 1.0f / 448.0f;
      break;
    }
    case SchemeKind::Dense: {
      const std::size_t size = dtype_size(dtype);
      if (dtype != DType::BF16 && dtype != DType::F16 && dtype != DType::F32)
        fail("random_weight: dense dtype ", dtype_name(dtype), " is not supported");
      o->data.resize(nk * size);
      std::uint8_t* bytes = o->data.data();
      auto fill = [bytes, dtype](Rng& g, std::size_t begin, std::size_t end) {
        for (std::size_t i = begin; i < end; ++i) {
          const float v = g.uniform(-0.05f, 0.05f);
          if (dtype == DType::F32) {
            std::memcpy(bytes + 4 * i, &v, 4);
          } else {
            const std::uint16_t bits = dtype == DType::BF16 ? float_to_bf16(v) : float_to_fp16(v);
            bytes[2 * i] = static_cast<std::uint8_t>(bits & 0xFF);
            bytes[2 * i + 1] = static_cast<std::uint8_t>(bits >> 8);
          }
        }
      };
      // A big matrix in pieces with generators of their own, seeded from this one and filled on
      // the pool: the same bytes for a seed on any number of threads. One generator for all took
      // ~1 s of a 397B checkpoint's start, whose BF16 projections get 200M random weights
      // (docs/perf.md, session 36). Small ones keep the one stream, and so their old values.
      constexpr std::size_t kPiece = std::size_t{1} << 18;
      if (nk <= kPiece) {
        fill(rng, 0, nk);
        break;
      }
      const std::uint64_t seed = rng.next();
      parallel_for(static_cast<std::int64_t>((nk + kPiece - 1) / kPiece), 1, [&](std::int64_t p0, std::int64_t p1) {
        for (std::int64_t p = p0; p < p1; ++p) {
          Rng piece(seed + static_cast<std::uint64_t>(p) * 0x9E3779B97F4A7C15ull);
          fill(piece, static_cast<std::size_t>(p) * kPiece, std::min(nk, static_cast<std::size_t>(p + 1) * kPiece));
        }
      });
      break;
    }
  }
  w.data = o->data.data();
  return o;
}

std::unique_ptr<OwnedWeight> hot_router(Rng& rng, const MoeShape& s, std::int64_t hot, const std::vector<float>& bias) {
  if (s.router_kind != SchemeKind::Dense) fail("hot_router: the router of this shape is ", scheme_kind_name(s.router_kind));
  auto r = random_weight(rng, SchemeKind::Dense, s.router_dtype, s.experts, s.hidden);
  const std::size_t size = dtype_size(s.router_dtype);
  for (std::int64_t e = 0; e < hot && e < s.experts; ++e)
    for (std::int64_t j = 0; j < s.hidden; ++j) {
      // Hot logits come out near 12 for any hidden size (|bias|^2 ~ hidden / 3): far above the
      // other experts' (std ~1), yet small enough that fp32 router rounding stays ~1e-7.
      const float v = 36.0f / static_cast<float>(s.hidden) * bias[static_cast<std::size_t>(j)] + rng.uniform(-0.01f, 0.01f);
      std::uint8_t* p = r->data.data() + (e * s.hidden + j) * static_cast<std::int64_t>(size);
      if (s.router_dtype == DType::F32) {
        std::memcpy(p, &v, 4);
      } else {
        const std::uint16_t bits = s.router_dtype == DType::BF16 ? float_to_bf16(v) : float_to_fp16(v);
        p[0] = static_cast<std::uint8_t>(bits & 0xFF);
        p[1] = static_cast<std::uint8_t>(bits >> 8);
      }
    }
  return r;
}

std::unique_ptr<OwnedMoe> random_moe(Rng& rng, const MoeShape& s, std::size_t max_bytes) {
  auto o = std::make_unique<OwnedMoe>();
  // Router: rows scaled so logits spread over a few units, as trained routers do.
  o->storage.push_back(random_weight(rng, s.router_kind, s.router_kind == SchemeKind::NVFP4 ? DType::U8 : s.router_dtype,
                                     s.experts, s.hidden));
  const WeightMatrix router = o->storage.back()->w;
  o->layer.router = router;
  o->layer.top_k = s.top_k;
  o->layer.norm_topk_prob = s.norm_topk_prob;

  const DType edt = s.expert_kind == SchemeKind::NVFP4 ? DType::U8 : s.expert_dtype;
  std::vector<std::array<const OwnedWeight*, 3>> pool;
  std::size_t bytes = 0;
  for (std::int64_t e = 0; e < s.experts; ++e) {
    if (bytes <= max_bytes || pool.empty()) {
      std::array<const OwnedWeight*, 3> set{};
      const std::int64_t shapes[3][2] = {{s.intermediate, s.hidden}, {s.intermediate, s.hidden}, {s.hidden, s.intermediate}};
      for (int p = 0; p < 3; ++p) {
        o->storage.push_back(random_weight(rng, s.expert_kind, edt, shapes[p][0], shapes[p][1]));
        set[p] = o->storage.back().get();
        bytes += o->storage.back()->data.size() + o->storage.back()->scales.size();
      }
      pool.push_back(set);
    }
    const auto& set = pool[static_cast<std::size_t>(e) % pool.size()];
    MoeExpert ex{set[0]->w, set[1]->w, set[2]->w};
    // Per-expert scales: experts sharing pool data still compute different functions.
    for (WeightMatrix* w : {&ex.gate, &ex.up, &ex.down})
      if (w->kind != SchemeKind::Dense) w->weight_scale_2 *= rng.uniform(0.5f, 2.0f);
    o->layer.experts.push_back(ex);
  }
  return o;
}

double output_error(const float* out, const float* ref, std::int64_t rows, std::int64_t cols) {
  std::vector<double> err(static_cast<std::size_t>(rows)), norm(static_cast<std::size_t>(rows));
  double total = 0.0;
  for (std::int64_t i = 0; i < rows; ++i) {
    double num = 0.0, den = 0.0;
    for (std::int64_t j = 0; j < cols; ++j) {
      const float o = out[i * cols + j];
      if (!std::isfinite(o)) return INFINITY;
      const double d = static_cast<double>(o) - ref[i * cols + j];
      num += d * d;
      den += static_cast<double>(ref[i * cols + j]) * ref[i * cols + j];
    }
    err[i] = num;
    norm[i] = den;
    total += den;
  }
  const double floor = rows > 0 ? total / static_cast<double>(rows) : 0.0;
  double worst = 0.0;
  for (std::int64_t i = 0; i < rows; ++i) {
    const double den = std::max(norm[i], floor);
    const double e = den > 0.0 ? std::sqrt(err[i] / den) : (err[i] == 0.0 ? 0.0 : INFINITY);
    worst = std::max(worst, e);
  }
  return worst;
}

}  // namespace fp4serve::kernels
