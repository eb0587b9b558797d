#pragma once
// What the AMX translation units share (amx_gemm.cpp, attention_prefill_amx.cpp): the tile
// configuration and the split of fp32 values into bf16 parts. Internal linkage only: included by
// ISA translation units (src/kernels/check_isa_objects.cmake).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

namespace fp4serve::kernels::amx {
namespace {

struct alignas(64) TileConfig {
  std::uint8_t palette_id;
  std::uint8_t start_row;
  std::uint8_t reserved[14];
  std::uint16_t colsb[16];
  std::uint8_t rows[16];
};

// GCC 12's _tile_loadconfig declares only the first 8 bytes of the configuration as read, so
// without the barrier the stores of the tiles' shapes may be dropped as dead. They were, in a
// kernel tried in session 37 (docs/perf.md): only the palette byte reached ldtilecfg, and the
// next tile load raised SIGILL.
inline void load_tile_config(const TileConfig& cfg) {
  __asm__ __volatile__("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

// A tile load that the compiler knows reads memory. GCC 12's _tile_loadd passes only the address,
// as a register, with no memory operand or clobber: stores of the data it loads (a packed panel,
// a decoded line) could then be moved after it, or dropped as dead when the buffer is local, as
// happened to the configuration above. The clobber orders every earlier store before the load.
// The tile number must be a literal (the intrinsic pastes it into the instruction).
#define FP4SERVE_TILE_LOAD(tile, base, stride)                                                       \
  __asm__ volatile("{tileloadd\t(%0,%1,1), %%tmm" #tile "|tileloadd\t%%tmm" #tile ", [%0+%1*1]}" \
                   : : "r"((const void*)(base)), "r"((long)(stride)) : "memory")

// All 8 tiles 16 rows deep; tiles 4 and 5 are `ab_bytes` wide, the others `cb_bytes`.
inline void configure_tiles(std::int64_t ab_bytes, std::int64_t cb_bytes) {
  TileConfig cfg;
  std::memset(&cfg, 0, sizeof(cfg));
  cfg.palette_id = 1;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = static_cast<std::uint16_t>(t == 4 || t == 5 ? ab_bytes : cb_bytes);
  }
  load_tile_config(cfg);
}

// The 32 values a (elements 0..15) and b (16..31) rounded to bf16 words (round to nearest even,
// vcvtne2ps2bf16); a and b keep what the rounding left, exactly (bf16 -> fp32 is a 16-bit shift,
// and the differences are exact in fp32), ready for the next part.
inline __m512i next_part(__m512& a, __m512& b) {
  const __m512bh bh = _mm512_cvtne2ps_pbh(b, a);
  __m512i w;
  std::memcpy(&w, &bh, sizeof(w));
  a = _mm512_sub_ps(a, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(w)), 16)));
  b = _mm512_sub_ps(b, _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(w, 1)), 16)));
  return w;
}

}  // namespace
}  // namespace fp4serve::kernels::amx
