#include "synth/random_weights.h"

namespace fp4serve::synth {

namespace {

std::uint64_t splitmix64(std::uint64_t& state) {
  std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

std::uint64_t stream_seed(std::uint64_t seed, std::string_view name, std::uint64_t chunk) {
  std::uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a over the name
  for (char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001B3ull;
  }
  std::uint64_t state = seed ^ h ^ (chunk * 0xD6E8FEB86659FD93ull);
  return splitmix64(state);
}

void fill_normal(std::uint64_t stream, float mean, float stddev, std::span<float> out) {
  // Sum of four 16-bit uniforms: mean 2, variance 1/3, so (sum - 2) * sqrt(3) has unit variance.
  constexpr float kInv16 = 1.0f / 65536.0f;
  constexpr float kSqrt3 = 1.7320508f;
  std::uint64_t state = stream;
  for (float& v : out) {
    const std::uint64_t r = splitmix64(state);
    const float sum = (static_cast<float>(r & 0xFFFF) + static_cast<float>((r >> 16) & 0xFFFF) +
                       static_cast<float>((r >> 32) & 0xFFFF) + static_cast<float>(r >> 48) + 2.0f) *
                      kInv16;
    v = mean + (sum - 2.0f) * kSqrt3 * stddev;
  }
}

void fill_uniform(std::uint64_t stream, float lo, float hi, std::span<float> out) {
  constexpr float kInv24 = 1.0f / 16777216.0f;  // 24 random bits: exact in a float
  std::uint64_t state = stream;
  for (float& v : out) {
    const float u = static_cast<float>(splitmix64(state) >> 40) * kInv24;  // [0, 1)
    v = lo + (hi - lo) * u;
  }
}

}  // namespace fp4serve::synth
