#pragma once
// Per-thread scratch memory for kernels: grown on demand, never shrunk, 64-byte aligned. Each
// caller layer owns a range of slots so nested users (the MoE driver calling a GEMM on the same
// thread) never hand out the same buffer twice.
#include <cstddef>

namespace fp4serve::kernels {

enum ScratchSlot : int {
  kScratchGemmActivations = 0,  // a GEMM's prepared activations (shared read-only with workers)
  kScratchGemmWeights = 1,      // a worker's decoded weight panel
  kScratchGemmOut = 2,          // a worker's output tile
  kScratchGemmW4a4 = 3,         // fake-quantized activations for W4A4
  kScratchMoeFirst = 4,         // 4..9: the MoE driver
  kScratchAttention = 10,       // attention scores
  kScratchLinearAttention = 11,  // a delta rule task's state slice
  kScratchDecay = 12,            // the delta rule's exp(g), shared read-only with workers
  kScratchInt8Activations = 13,  // the AVX2 int8 GEMM's last quantized activations, kept across calls
  kScratchVnniInt8Activations = 14,  // the same for the VNNI kernels (their own code layout)
  kScratchAttentionPartials = 15,    // split decode attention: each split's softmax partials (shared with workers)
  kScratchVnniInt8Groups = 16,       // the VNNI int8 GEMM for m >= 16: its token groups' records
  kScratchAttentionTiles = 17,      // AMX prefill attention: a tile's bf16 parts, scores and sums
  kScratchAttentionKv = 18,         // AMX prefill attention: every KV head's packed keys and values (shared with workers)
  kScratchSlots = 19,
};

// A buffer of at least `bytes` private to the calling thread, valid until the next call with the
// same slot on this thread. Contents are unspecified on first use and kept by later calls that
// fit; a call that needs more bytes returns a new pointer (so a changed pointer means lost contents).
void* thread_scratch(int slot, std::size_t bytes);

// Generic code only: ISA files call thread_scratch() and cast, so no template instantiation is
// ever compiled with ISA flags (see src/kernels/CMakeLists.txt).
template <class T>
T* thread_scratch_as(int slot, std::size_t count) {
  return static_cast<T*>(thread_scratch(slot, count * sizeof(T)));
}

}  // namespace fp4serve::kernels
