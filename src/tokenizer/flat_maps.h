#pragma once
// Two open-addressing hash tables for the BPE model's hot lookups. std::unordered_map allocates a
// node per entry, which made loading the 151k-entry vocabulary and merge list slow and scattered
// the entries across memory; these keep everything in a few flat arrays.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp4serve::tokenizer {

// token text -> id. Texts live in one arena string.
class TokenIndex {
 public:
  void reserve(std::size_t n);
  // Adds or replaces the id of `token`.
  void insert(std::string_view token, std::uint32_t id);
  std::optional<std::uint32_t> find(std::string_view token) const;
  std::size_t size() const { return entries_.size(); }

  // Visits every (token, id) pair in insertion order.
  template <class F>
  void for_each(F&& f) const {
    for (const Entry& e : entries_) f(std::string_view(arena_).substr(e.offset, e.length), e.id);
  }

 private:
  struct Entry {
    std::uint64_t offset;
    std::uint32_t length;
    std::uint32_t id;
  };
  std::size_t slot_of(std::string_view token, std::uint64_t hash) const;
  void grow();

  std::string arena_;
  std::vector<Entry> entries_;
  std::vector<std::uint32_t> slots_;  // index + 1 into entries_, 0 = empty
  std::vector<std::uint32_t> hashes_;  // low bits of each entry's hash, to skip most compares
};

// (left id, right id) -> merge rank and merged id.
class PairMap {
 public:
  struct Value {
    std::uint32_t rank;
    std::uint32_t merged;
  };
  void reserve(std::size_t n);
  void insert_or_assign(std::uint32_t left, std::uint32_t right, Value value);
  const Value* find(std::uint32_t left, std::uint32_t right) const {
    if (keys_.empty()) return nullptr;
    const std::uint64_t key = (static_cast<std::uint64_t>(left) << 32) | right;
    for (std::size_t i = bucket(key);; i = (i + 1) & mask_) {
      if (keys_[i] == key) return &values_[i];
      if (keys_[i] == kEmpty) return nullptr;
    }
  }
  std::size_t size() const { return size_; }

 private:
  static constexpr std::uint64_t kEmpty = ~std::uint64_t{0};
  std::size_t bucket(std::uint64_t key) const {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_) & mask_;
  }
  void rehash(std::size_t capacity);

  std::vector<std::uint64_t> keys_;
  std::vector<Value> values_;
  std::size_t mask_ = 0;
  unsigned shift_ = 64;
  std::size_t size_ = 0;
};

}  // namespace fp4serve::tokenizer
