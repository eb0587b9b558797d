#pragma once
// Lookup tables every fast backend decodes with, built once from the scalar numerics (the
// exhaustively tested source of truth), so no backend carries its own copy of a format.
#include <cstdint>

namespace fp4serve::kernels {

struct alignas(64) DecodeTables {
  float e2m1[16];       // E2M1 code -> value (codes 8..15 negative)
  float e2m1_mag[8];    // |value| of codes 0..7, for 8-lane permutes (AVX2)
  float e4m3[256];      // E4M3 "fn" code -> value; 0x7F / 0xFF are NaN
  // bf16 bits of e2m1[c] * e4m3[s] at [s][c]: one 32-byte table per block scale, so a block
  // decodes to bf16 with one word permute (AMX). Exact: the product has at most 6 significant
  // bits; NaN scales give NaN entries.
  alignas(32) std::uint16_t e2m1_scaled_bf16[256][16];
};

const DecodeTables& decode_tables();

}  // namespace fp4serve::kernels
