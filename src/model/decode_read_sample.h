#pragma once
// Where a decode step's weight bytes lie in memory, sampled: what `bench` reads beside the batch-1
// decode to measure the bandwidth its roofline uses. On session 28's VM the lm_head alone read
// 19.8 and 31.2 GB/s after two page-cache refills, this sample 23.5 and 28.0, a fresh buffer 31
// both times: where the page cache put one tensor said little about the rest (docs/perf.md,
// "Session 28").
#include <cstdint>
#include <span>
#include <vector>

#include "model/model_weights.h"

namespace fp4serve {

// `budget` bytes of `spans`, in pieces of at most `piece` bytes spread evenly over them: the
// spans are put in address order and joined where at most 64 bytes apart (a safetensors file
// packs its tensors end to end; between an expert's codes and scales lie only its 4-byte scalar
// scales), so a piece streams as decode does; piece i starts at i x (total / pieces) in them laid
// end to end and runs on across their ends. All of them, joined, when the budget covers them.
std::vector<std::span<const std::uint8_t>> sample_evenly(std::vector<std::span<const std::uint8_t>> spans,
                                                         std::uint64_t budget, std::uint64_t piece);

// As many bytes as a decode step reads (step_bytes): the lm_head whole (every step reads it),
// first, then 2 MiB pieces of every other matrix's codes and block scales (attention, router,
// experts: a step reads the shared ones and top_k experts, over many steps every expert alike).
// The embedding table is left out: a step reads one row of it.
std::vector<std::span<const std::uint8_t>> decode_read_sample(const ModelWeights& w, std::uint64_t step_bytes);

}  // namespace fp4serve
