#pragma once
// Sums of 64-bit words, read with 128-, 256- or 512-bit loads: the inner loop of the memory
// bandwidth probe. The width matters for a probe, not for the sum: a core keeps only so many loads
// in flight, and with 16-byte loads four of them cover one cache line where one 64-byte load does,
// so the narrow loop asks memory for fewer lines at a time. On the session-25 Xeon two threads read
// 22 GB/s with the compiler's 16-byte loop and 31-32 GB/s with 64-byte loads (docs/perf.md).
#include <cstdint>

namespace fp4serve {

// The sum (mod 2^64) of p[b], ..., p[e - 1]; p need not be aligned beyond 8 bytes.
using WordSumFn = std::uint64_t (*)(const std::uint64_t* p, std::int64_t b, std::int64_t e);

// The widest load this CPU and OS run (util/cpu_features.h, so FP4SERVE_CPU_DISABLE counts): 512
// with AVX-512F, 256 with AVX2, else 128 (SSE2, every x86-64).
int widest_word_sum_bits();

struct WordSum {
  WordSumFn fn;
  int load_bits;  // the width fn loads with
};

// The loop with loads of load_bits (128, 256 or 512); 0 picks the widest. Throws Error naming
// load_bits when it is another value or the CPU lacks the instructions.
WordSum word_sum(int load_bits);

}  // namespace fp4serve
