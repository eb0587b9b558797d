#include "util/word_sum.h"

#include <immintrin.h>

#include "util/cpu_features.h"
#include "util/error.h"

namespace fp4serve {

namespace {

// Four independent accumulators per loop, so the loads, not the adds, set the pace. Each
// function is compiled for its own ISA (target attribute) and called only after the CPU check;
// the words past the last whole vector step go through the plain loop.
std::uint64_t sum_tail(const std::uint64_t* p, std::int64_t i, std::int64_t e) {
  std::uint64_t s = 0;
  for (; i < e; ++i) s += p[i];
  return s;
}

std::uint64_t sum_128(const std::uint64_t* p, std::int64_t b, std::int64_t e) {
  __m128i a0 = _mm_setzero_si128(), a1 = a0, a2 = a0, a3 = a0;
  std::int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    a0 = _mm_add_epi64(a0, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i)));
    a1 = _mm_add_epi64(a1, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 2)));
    a2 = _mm_add_epi64(a2, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 4)));
    a3 = _mm_add_epi64(a3, _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + i + 6)));
  }
  alignas(16) std::uint64_t lanes[2];
  _mm_store_si128(reinterpret_cast<__m128i*>(lanes), _mm_add_epi64(_mm_add_epi64(a0, a1), _mm_add_epi64(a2, a3)));
  return lanes[0] + lanes[1] + sum_tail(p, i, e);
}

__attribute__((target("avx2"))) std::uint64_t sum_256(const std::uint64_t* p, std::int64_t b, std::int64_t e) {
  __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
  std::int64_t i = b;
  for (; i + 16 <= e; i += 16) {
    a0 = _mm256_add_epi64(a0, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
    a1 = _mm256_add_epi64(a1, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
    a2 = _mm256_add_epi64(a2, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
    a3 = _mm256_add_epi64(a3, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
  }
  alignas(32) std::uint64_t lanes[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), _mm256_add_epi64(_mm256_add_epi64(a0, a1), _mm256_add_epi64(a2, a3)));
  std::uint64_t s = 0;
  for (std::uint64_t v : lanes) s += v;
  return s + sum_tail(p, i, e);
}

__attribute__((target("avx512f"))) std::uint64_t sum_512(const std::uint64_t* p, std::int64_t b, std::int64_t e) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  std::int64_t i = b;
  for (; i + 32 <= e; i += 32) {
    a0 = _mm512_add_epi64(a0, _mm512_loadu_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_loadu_si512(p + i + 8));
    a2 = _mm512_add_epi64(a2, _mm512_loadu_si512(p + i + 16));
    a3 = _mm512_add_epi64(a3, _mm512_loadu_si512(p + i + 24));
  }
  alignas(64) std::uint64_t lanes[8];
  _mm512_store_si512(lanes, _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3)));
  std::uint64_t s = 0;
  for (std::uint64_t v : lanes) s += v;
  return s + sum_tail(p, i, e);
}

bool runs(int bits) {
  if (bits == 512) return cpu_features().usable(CpuFeature::AVX512F);
  if (bits == 256) return cpu_features().usable(CpuFeature::AVX2);
  return bits == 128;
}

}  // namespace

int widest_word_sum_bits() { return runs(512) ? 512 : runs(256) ? 256 : 128; }

WordSum word_sum(int load_bits) {
  if (load_bits == 0) load_bits = widest_word_sum_bits();
  if (load_bits != 128 && load_bits != 256 && load_bits != 512)
    fail("memory bandwidth: load_bits must be 0, 128, 256 or 512, got ", load_bits);
  if (!runs(load_bits)) {
    const CpuFeature needed = load_bits == 512 ? CpuFeature::AVX512F : CpuFeature::AVX2;
    fail("memory bandwidth: load_bits ", load_bits, " needs ", load_bits == 512 ? "AVX-512F" : "AVX2",
         ", which is not usable here: ", cpu_features().missing({needed}).front());
  }
  return {load_bits == 512 ? sum_512 : load_bits == 256 ? sum_256 : sum_128, load_bits};
}

}  // namespace fp4serve
