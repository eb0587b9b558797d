#pragma once
// The upper halves of the vector registers between kernels and generic code.
//
// Kernels in the ISA files write YMM/ZMM registers; the generic files are compiled for plain
// x86-64, so their floating-point code is legacy SSE. While bits 128-511 of registers 0-15 hold
// data ("dirty upper state"), Intel cores slow every legacy-SSE instruction (each merges with the
// upper bits). GCC puts `vzeroupper` before every return of a function that used them, except
// where it thinks the state is already clean: after a call to a function that took a vector
// argument (whose own return skips it). A kernel that moved such a helper out of line returned
// dirty, and the model's scalar SiLU after it ran ~10x slower: a Qwen3.5-shaped batch-16 step
// lost 12 % (docs/perf.md, session 41). The thread pool therefore clears the state after every
// job, and tests/kernels/upper_state_test.cpp checks each backend's kernels on the calling thread
// (in optimized builds: at -O0 GCC emits no vzeroupper at all).
#include <optional>

namespace fp4serve {

// `vzeroupper` where the CPU and OS have AVX; nothing elsewhere (no upper state to clear).
void clear_upper_vector_state();

// Whether YMM bits 128-255 or ZMM bits 256-511 of registers 0-15 are in use on this thread
// (XGETBV(1), XINUSE bits 2 and 6); nullopt where the CPU cannot say (no XGETBV with ECX = 1).
// ZMM16-31 (XINUSE bit 7) do not count: legacy SSE cannot reach them, and vzeroupper leaves them.
std::optional<bool> upper_vector_state_in_use();

}  // namespace fp4serve
