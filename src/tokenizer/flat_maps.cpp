#include "tokenizer/flat_maps.h"

#include <bit>
#include <functional>

namespace fp4serve::tokenizer {

namespace {
std::uint64_t hash_text(std::string_view s) { return std::hash<std::string_view>{}(s); }
}  // namespace

void TokenIndex::reserve(std::size_t n) {
  entries_.reserve(n);
  hashes_.reserve(n);
  if (slots_.size() < 2 * n) {
    slots_.assign(std::bit_ceil(2 * n), 0);
    for (std::size_t i = 0; i < entries_.size(); ++i) {
      const Entry& e = entries_[i];
      const std::string_view t = std::string_view(arena_).substr(e.offset, e.length);
      slots_[slot_of(t, hash_text(t))] = static_cast<std::uint32_t>(i + 1);
    }
  }
}

void TokenIndex::grow() { reserve(std::max<std::size_t>(16, entries_.size() * 2)); }

std::size_t TokenIndex::slot_of(std::string_view token, std::uint64_t hash) const {
  const std::size_t mask = slots_.size() - 1;
  const auto tag = static_cast<std::uint32_t>(hash);
  for (std::size_t i = (hash >> 32) & mask;; i = (i + 1) & mask) {
    const std::uint32_t s = slots_[i];
    if (s == 0) return i;
    const Entry& e = entries_[s - 1];
    if (hashes_[s - 1] == tag && e.length == token.size() &&
        std::string_view(arena_).substr(e.offset, e.length) == token) {
      return i;
    }
  }
}

void TokenIndex::insert(std::string_view token, std::uint32_t id) {
  if (2 * (entries_.size() + 1) > slots_.size()) grow();
  const std::uint64_t hash = hash_text(token);
  const std::size_t slot = slot_of(token, hash);
  if (slots_[slot] != 0) {
    entries_[slots_[slot] - 1].id = id;
    return;
  }
  entries_.push_back({arena_.size(), static_cast<std::uint32_t>(token.size()), id});
  hashes_.push_back(static_cast<std::uint32_t>(hash));
  arena_.append(token);
  slots_[slot] = static_cast<std::uint32_t>(entries_.size());
}

std::optional<std::uint32_t> TokenIndex::find(std::string_view token) const {
  if (slots_.empty()) return std::nullopt;
  const std::uint32_t s = slots_[slot_of(token, hash_text(token))];
  if (s == 0) return std::nullopt;
  return entries_[s - 1].id;
}

void PairMap::reserve(std::size_t n) {
  if (keys_.size() < 2 * n) rehash(std::bit_ceil(std::max<std::size_t>(16, 2 * n)));
}

void PairMap::rehash(std::size_t capacity) {
  std::vector<std::uint64_t> old_keys = std::move(keys_);
  std::vector<Value> old_values = std::move(values_);
  keys_.assign(capacity, kEmpty);
  values_.assign(capacity, Value{});
  mask_ = capacity - 1;
  shift_ = 64 - static_cast<unsigned>(std::countr_zero(capacity));
  for (std::size_t i = 0; i < old_keys.size(); ++i) {
    if (old_keys[i] == kEmpty) continue;
    std::size_t j = bucket(old_keys[i]);
    while (keys_[j] != kEmpty) j = (j + 1) & mask_;
    keys_[j] = old_keys[i];
    values_[j] = old_values[i];
  }
}

void PairMap::insert_or_assign(std::uint32_t left, std::uint32_t right, Value value) {
  if (2 * (size_ + 1) > keys_.size()) rehash(std::max<std::size_t>(16, keys_.size() * 2));
  const std::uint64_t key = (static_cast<std::uint64_t>(left) << 32) | right;
  std::size_t i = bucket(key);
  while (keys_[i] != kEmpty && keys_[i] != key) i = (i + 1) & mask_;
  if (keys_[i] == kEmpty) ++size_;
  keys_[i] = key;
  values_[i] = value;
}

}  // namespace fp4serve::tokenizer
