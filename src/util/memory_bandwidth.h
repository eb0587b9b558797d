#pragma once
// This machine's memory read bandwidth: every thread of the kernel pool streams through a buffer
// much larger than the last-level cache, pass after pass; the best and the median pass are kept.
// Decode reads every active weight once per token, so this is the roofline `fp4serve bench` and
// bench/kernels_bench compare decode against. On a shared host the bandwidth moves both ways:
// neighbours lower it, and on some VMs it comes in fast bursts of a few hundred milliseconds
// (docs/perf.md, sessions 23-24), so `bench` spreads its passes over seconds and uses the median.
#include <cstdint>
#include <span>
#include <vector>

namespace fp4serve {

struct BandwidthOptions {
  // Buffer size; 0 picks 4 x the last-level cache, at least 512 MiB and at most 2 GiB.
  std::uint64_t bytes = 0;
  int passes = 3;  // timed passes after one untimed warm-up pass (at least this many)
  // More passes until the timed ones add up to this many seconds (at most kMaxBandwidthPasses).
  double min_seconds = 0.0;
  // Width of the probe's loads (util/word_sum.h): 0 takes the widest the CPU runs, which is what
  // the decode kernels use; 128, 256 or 512 force one (tests, experiments).
  int load_bits = 0;
};

inline constexpr int kMaxBandwidthPasses = 1000;

struct BandwidthResult {
  std::uint64_t bytes = 0;            // buffer size streamed per pass
  int threads = 0;                    // the kernel pool's size
  std::uint64_t llc_bytes = 0;        // last-level cache as the OS reports it; 0 if unknown
  double best_gb_per_s = 0.0;         // 1 GB = 1e9 bytes
  // The middle pass (mean of the two middle ones for an even count): reported next to the best so
  // a reader sees how far one run's passes spread on a shared machine (docs/perf.md, session 7).
  double median_gb_per_s = 0.0;
  std::vector<double> pass_gb_per_s;  // every timed pass, in order
  double seconds = 0.0;               // the timed passes' total
  int load_bits = 0;                  // the width of the loads that read it
};

// Throws Error when the options are out of range or the buffer cannot be allocated.
BandwidthResult measure_read_bandwidth(const BandwidthOptions& options = {});

// The same passes over memory the caller already holds (options.bytes must be 0): every pass
// reads each region whole, from its first 8-byte-aligned word, in pieces the threads share.
// `bench` reads a sample of the weights decode reads every token, between the decode
// repetitions: those pages are resident already, wherever the page cache put them, so this
// measures the memory in the same minutes as the decode without allocating a buffer that would
// count in the process's resident memory. Throws Error when the regions hold under 1 MiB.
BandwidthResult measure_regions_bandwidth(std::span<const std::span<const std::uint8_t>> regions,
                                          const BandwidthOptions& options = {});

// The default buffer for a last-level cache of llc_bytes: 4 x it, clamped to [512 MiB, 2 GiB].
std::uint64_t default_bandwidth_buffer_bytes(std::uint64_t llc_bytes);

// Size of the largest cache level /sys reports for CPU 0; 0 when unknown.
std::uint64_t last_level_cache_bytes();

}  // namespace fp4serve
