#include "engine/kv_cache.h"

#include <algorithm>

#include "util/error.h"

namespace fp4serve::engine {

KvCache::KvCache(const Qwen3Model& model, std::int64_t initial_capacity)
    : layers_(model.config().num_hidden_layers), row_floats_(model.kv_row_floats()) {
  keys_.resize(static_cast<std::size_t>(layers_));
  values_.resize(static_cast<std::size_t>(layers_));
  reserve_more(std::max<std::int64_t>(initial_capacity, 1));
}

void KvCache::reserve_more(std::int64_t extra) {
  const std::int64_t need = length_ + extra;
  if (need <= capacity_) return;
  const std::int64_t grown = std::max(need, 2 * capacity_);
  const auto floats = static_cast<std::size_t>(grown * row_floats_);
  for (std::size_t l = 0; l < keys_.size(); ++l) {
    keys_[l].resize(floats);  // keeps the cached rows
    values_[l].resize(floats);
  }
  capacity_ = grown;
}

KvView KvCache::view() {
  KvView v;
  v.past = length_;
  v.capacity = capacity_;
  for (std::size_t l = 0; l < keys_.size(); ++l) {
    v.keys.push_back(keys_[l].data());
    v.values.push_back(values_[l].data());
  }
  return v;
}

void KvCache::advance(std::int64_t n) {
  if (n < 0 || length_ + n > capacity_) fail("KV cache: advancing by ", n, " past capacity ", capacity_);
  length_ += n;
}

void KvCache::truncate(std::int64_t n) { length_ = std::clamp<std::int64_t>(n, 0, length_); }

std::uint64_t KvCache::bytes() const {
  return 2ull * static_cast<std::uint64_t>(layers_) * static_cast<std::uint64_t>(capacity_ * row_floats_) *
         sizeof(float);
}

}  // namespace fp4serve::engine
