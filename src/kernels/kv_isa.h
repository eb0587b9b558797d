#pragma once
// The KV cache's element type (AttentionArgs::kv_dtype, kernels/kv_cache.h) as a template argument
// of the ISA attention kernels: each path is instantiated per type, so the fp32 code is the
// same instructions as without 16-bit caches, and the 16-bit ones widen each row as they load it.
// In an anonymous namespace like nvfp4_isa_common.h: every ISA translation unit gets its own copy.
#include <cstdint>

#include "formats/dtype.h"

namespace fp4serve::kernels {
namespace {

enum class Kv { F32, F16, BF16 };

template <Kv E>
constexpr std::int64_t kKvElementBytes = E == Kv::F32 ? 4 : 2;

template <Kv E>
struct KvType {
  static constexpr Kv kValue = E;
};

// fn(KvType<E>{}) for the run-time type (the attention wrappers have checked it: F32, F16, BF16).
template <class Fn>
void with_kv_type(DType dtype, Fn&& fn) {
  if (dtype == DType::F16) return fn(KvType<Kv::F16>{});
  if (dtype == DType::BF16) return fn(KvType<Kv::BF16>{});
  fn(KvType<Kv::F32>{});
}

}  // namespace
}  // namespace fp4serve::kernels
