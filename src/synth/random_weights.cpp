#include "synth/random_weights.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define FP4SERVE_SYNTH_AVX512 1
// GCC 12 reports the intrinsics' deliberately undefined pass-through operands as "maybe
// uninitialized" once they are inlined here; the warning is false (as in src/kernels).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#endif

namespace fp4serve::synth {

namespace {

constexpr std::uint64_t kGolden = 0x9E3779B97F4A7C15ull;
constexpr std::uint64_t kMix1 = 0xBF58476D1CE4E5B9ull;
constexpr std::uint64_t kMix2 = 0x94D049BB133111EBull;
// Irwin-Hall of four 16-bit uniforms: mean 2, variance 1/3, so (sum - 2) * sqrt(3) has unit variance.
constexpr float kInv16 = 1.0f / 65536.0f;
constexpr float kSqrt3 = 1.7320508f;

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += kGolden);
  z = (z ^ (z >> 30)) * kMix1;
  z = (z ^ (z >> 27)) * kMix2;
  return z ^ (z >> 31);
}

}  // namespace

std::uint64_t stream_seed(std::uint64_t seed, std::string_view name, std::uint64_t chunk) {
  std::uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a over the name
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  std::uint64_t state = seed ^ h ^ (chunk * 0xD6E8FEB86659FD93ull);
  return splitmix64(state);
}

void fill_normal_scalar(std::uint64_t stream, float mean, float stddev, std::span<float> out) {
  std::uint64_t state = stream;
  for (float& v : out) {
    const std::uint64_t r = splitmix64(state);
    const float sum = (static_cast<float>(r & 0xFFFF) + static_cast<float>((r >> 16) & 0xFFFF) +
                       static_cast<float>((r >> 32) & 0xFFFF) + static_cast<float>(r >> 48) + 2.0f) *
                      kInv16;
    v = mean + (sum - 2.0f) * kSqrt3 * stddev;
  }
}

#ifdef FP4SERVE_SYNTH_AVX512

namespace {

bool has_avx512_dq() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return ok;
}

// 8 values per step. The four 16-bit fields and the 2 are added as integers: every partial sum
// is an integer below 2^18, which the scalar code's fp32 additions also hold exactly, so one
// conversion gives the same float; the remaining operations keep the scalar order.
__attribute__((target("avx512f,avx512dq"))) std::size_t fill_normal_avx512(std::uint64_t stream, float mean,
                                                                            float stddev, float* out,
                                                                            std::size_t n) {
  const __m512i lane = _mm512_set_epi64(8, 7, 6, 5, 4, 3, 2, 1);
  __m512i state = _mm512_add_epi64(_mm512_set1_epi64(static_cast<long long>(stream)),
                                   _mm512_mullo_epi64(lane, _mm512_set1_epi64(static_cast<long long>(kGolden))));
  const __m512i step = _mm512_set1_epi64(static_cast<long long>(8 * kGolden));
  const __m512i mix1 = _mm512_set1_epi64(static_cast<long long>(kMix1));
  const __m512i mix2 = _mm512_set1_epi64(static_cast<long long>(kMix2));
  const __m512i field = _mm512_set1_epi64(0xFFFF);
  const __m512i two = _mm512_set1_epi64(2);
  const __m256 inv16 = _mm256_set1_ps(kInv16), two_f = _mm256_set1_ps(2.0f), sqrt3 = _mm256_set1_ps(kSqrt3);
  const __m256 sd = _mm256_set1_ps(stddev), mu = _mm256_set1_ps(mean);
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m512i z = state;
    state = _mm512_add_epi64(state, step);
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)), mix1);
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)), mix2);
    z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
    __m512i sum = _mm512_add_epi64(_mm512_and_si512(z, field), _mm512_and_si512(_mm512_srli_epi64(z, 16), field));
    sum = _mm512_add_epi64(sum, _mm512_and_si512(_mm512_srli_epi64(z, 32), field));
    sum = _mm512_add_epi64(_mm512_add_epi64(sum, _mm512_srli_epi64(z, 48)), two);
    const __m256 u = _mm256_mul_ps(_mm512_cvtepi64_ps(sum), inv16);
    const __m256 scaled = _mm256_mul_ps(_mm256_mul_ps(_mm256_sub_ps(u, two_f), sqrt3), sd);
    _mm256_storeu_ps(out + i, _mm256_add_ps(mu, scaled));
  }
  return i;
}

}  // namespace

void fill_normal(std::uint64_t stream, float mean, float stddev, std::span<float> out) {
  if (!has_avx512_dq()) return fill_normal_scalar(stream, mean, stddev, out);
  const std::size_t done = fill_normal_avx512(stream, mean, stddev, out.data(), out.size());
  // The tail continues the same sequence: value i uses the state after i + 1 steps.
  fill_normal_scalar(stream + done * kGolden, mean, stddev, out.subspan(done));
}

#else

void fill_normal(std::uint64_t stream, float mean, float stddev, std::span<float> out) {
  fill_normal_scalar(stream, mean, stddev, out);
}

#endif

void fill_uniform(std::uint64_t stream, float lo, float hi, std::span<float> out) {
  constexpr float kInv24 = 1.0f / 16777216.0f;  // 24 random bits: exact in a float
  std::uint64_t state = stream;
  for (float& v : out) {
    const float u = static_cast<float>(splitmix64(state) >> 40) * kInv24;  // [0, 1)
    v = lo + (hi - lo) * u;
  }
}

}  // namespace fp4serve::synth
