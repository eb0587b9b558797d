#pragma once
// This machine's memory read bandwidth: every thread of the kernel pool streams through a buffer
// much larger than the last-level cache, and the best of a few passes is kept (the least
// disturbed by other processes). Decode reads every active weight once per token, so this is
// the roofline `fp4serve bench` and bench/kernels_bench compare decode against.
#include <cstdint>
#include <vector>

namespace fp4serve {

struct BandwidthOptions {
  // Buffer size; 0 picks 4 x the last-level cache, at least 512 MiB and at most 2 GiB.
  std::uint64_t bytes = 0;
  int passes = 3;  // timed passes after one untimed warm-up pass
};

struct BandwidthResult {
  std::uint64_t bytes = 0;            // buffer size streamed per pass
  int threads = 0;                    // the kernel pool's size
  std::uint64_t llc_bytes = 0;        // last-level cache as the OS reports it; 0 if unknown
  double best_gb_per_s = 0.0;         // 1 GB = 1e9 bytes
  // The middle pass (mean of the two middle ones for an even count): reported next to the best so
  // a reader sees how far one run's passes spread on a shared machine (docs/perf.md, session 7).
  double median_gb_per_s = 0.0;
  std::vector<double> pass_gb_per_s;  // every timed pass, in order
};

// Throws Error when the options are out of range or the buffer cannot be allocated.
BandwidthResult measure_read_bandwidth(const BandwidthOptions& options = {});

// The default buffer for a last-level cache of llc_bytes: 4 x it, clamped to [512 MiB, 2 GiB].
std::uint64_t default_bandwidth_buffer_bytes(std::uint64_t llc_bytes);

// Size of the largest cache level /sys reports for CPU 0; 0 when unknown.
std::uint64_t last_level_cache_bytes();

}  // namespace fp4serve
