#include "util/memory_bandwidth.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <string>

#include "util/error.h"
#include "util/huge_pages.h"
#include "util/median.h"
#include "util/thread_pool.h"
#include "util/word_sum.h"

namespace fp4serve {

namespace {

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
// Pieces threads claim one at a time: big enough that each streams contiguously for a while
// (the hardware prefetcher needs a few pages to ramp up), small enough to balance two cores
// when a neighbour's job slows one of them down.
constexpr std::int64_t kPieceWords = (std::int64_t{8} << 20) / 8;

// "32768K", "480M", "2G" -> bytes; 0 when unreadable.
std::uint64_t parse_cache_size(const std::string& s) {
  std::size_t used = 0;
  unsigned long long v = 0;
  try {
    v = std::stoull(s, &used);
  } catch (const std::exception&) {
    return 0;
  }
  const char unit = used < s.size() ? s[used] : '\0';
  if (unit == 'K') return v << 10;
  if (unit == 'M') return v << 20;
  if (unit == 'G') return v << 30;
  return v;
}

}  // namespace

std::uint64_t last_level_cache_bytes() {
  std::uint64_t best = 0;
  for (int index = 0; index < 8; ++index) {
    std::ifstream f("/sys/devices/system/cpu/cpu0/cache/index" + std::to_string(index) + "/size");
    std::string s;
    if (!(f >> s)) continue;
    best = std::max(best, parse_cache_size(s));
  }
  return best;
}

std::uint64_t default_bandwidth_buffer_bytes(std::uint64_t llc_bytes) {
  return std::clamp<std::uint64_t>(4 * llc_bytes, 512 * kMiB, 2048 * kMiB);
}

namespace {

void check_options(const BandwidthOptions& options) {
  if (options.passes < 1 || options.passes > 100) fail("memory bandwidth: passes must be 1..100, got ", options.passes);
  if (!(options.min_seconds >= 0.0 && options.min_seconds <= 60.0))
    fail("memory bandwidth: min_seconds must be 0..60, got ", options.min_seconds);
  word_sum(options.load_bits);  // throws naming load_bits, before any buffer is allocated
}

// A run of words one thread sums; a pass reads every piece once.
struct Piece {
  const std::uint64_t* p;
  std::int64_t words;
};

// Appends [p, p + words) in pieces of at most kPieceWords.
void add_pieces(const std::uint64_t* p, std::int64_t words, std::vector<Piece>& pieces) {
  for (std::int64_t at = 0; at < words; at += kPieceWords) pieces.push_back({p + at, std::min(kPieceWords, words - at)});
}

// One untimed warm-up pass (page tables, TLB, the workers waking up), then options.passes timed
// ones, and more until they add up to options.min_seconds. Returns the sum of every word read
// (the caller checks or keeps it, so the reads cannot be optimised away) and the pass count.
std::uint64_t timed_passes(const std::vector<Piece>& pieces, const BandwidthOptions& options, BandwidthResult& r,
                           int& passes_run) {
  r.threads = global_thread_pool().size();
  const WordSum word_sum_loop = word_sum(options.load_bits);
  const WordSumFn sum_words = word_sum_loop.fn;
  r.load_bits = word_sum_loop.load_bits;
  std::int64_t words = 0;
  for (const Piece& piece : pieces) words += piece.words;
  const auto count = static_cast<std::int64_t>(pieces.size());
  std::uint64_t sink = 0;
  int pass = 0;
  for (; pass <= options.passes || (r.seconds < options.min_seconds && pass <= kMaxBandwidthPasses); ++pass) {
    std::vector<std::uint64_t> sums(pieces.size(), 0);
    const auto start = std::chrono::steady_clock::now();
    parallel_for(count, 1, [&pieces, sum_words, &sums](std::int64_t b, std::int64_t e) {
      for (std::int64_t i = b; i < e; ++i) {
        const Piece& piece = pieces[static_cast<std::size_t>(i)];
        sums[static_cast<std::size_t>(i)] = sum_words(piece.p, 0, piece.words);
      }
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    for (std::uint64_t s : sums) sink += s;
    if (pass == 0) continue;
    r.seconds += seconds;
    const double gbs = static_cast<double>(words * 8) / std::max(seconds, 1e-9) / 1e9;
    r.pass_gb_per_s.push_back(gbs);
    r.best_gb_per_s = std::max(r.best_gb_per_s, gbs);
  }
  r.median_gb_per_s = median_of(r.pass_gb_per_s);
  passes_run = pass;
  return sink;
}

}  // namespace

BandwidthResult measure_read_bandwidth(const BandwidthOptions& options) {
  check_options(options);
  BandwidthResult r;
  r.llc_bytes = last_level_cache_bytes();
  r.bytes = options.bytes != 0 ? options.bytes : default_bandwidth_buffer_bytes(r.llc_bytes);
  if (r.bytes < kMiB) fail("memory bandwidth: buffer of ", r.bytes, " bytes is too small to measure memory (at least 1 MiB)");

  const auto words = static_cast<std::int64_t>(r.bytes / 8);
  // 2 MiB pages, as the weights get: through 4 KiB pages this VM's TLB, not its memory, is
  // what would be measured (19 against 32.6 GB/s here).
  const HugePageBuffer buf(static_cast<std::size_t>(r.bytes), "memory bandwidth buffer");
  auto* p = static_cast<std::uint64_t*>(buf.data());
  std::vector<Piece> pieces;
  add_pieces(p, words, pieces);
  // Non-zero contents, written by the pool: every page is really backed (untouched pages all
  // map the one shared zero page, which would be read from cache).
  parallel_for(static_cast<std::int64_t>(pieces.size()), 1, [&pieces, p](std::int64_t b, std::int64_t e) {
    for (std::int64_t i = b; i < e; ++i) {
      const Piece& piece = pieces[static_cast<std::size_t>(i)];
      for (std::int64_t w = piece.p - p; w < piece.p - p + piece.words; ++w) p[w] = static_cast<std::uint64_t>(w) | 1u;
    }
  });
  int passes_run = 0;
  const std::uint64_t sink = timed_passes(pieces, options, r, passes_run);
  // Each word is odd, so the total has the parity of the number of words read.
  if ((sink & 1u) != ((static_cast<std::uint64_t>(words) * static_cast<std::uint64_t>(passes_run)) & 1u))
    fail("memory bandwidth: read back a wrong sum (memory or thread-pool fault)");
  return r;
}

BandwidthResult measure_regions_bandwidth(std::span<const std::span<const std::uint8_t>> regions,
                                          const BandwidthOptions& options) {
  check_options(options);
  if (options.bytes != 0) fail("memory bandwidth: a region sets its own size (bytes must be 0, got ", options.bytes, ")");
  std::vector<Piece> pieces;
  std::uint64_t given = 0;
  for (const std::span<const std::uint8_t> region : regions) {
    const auto addr = reinterpret_cast<std::uintptr_t>(region.data());
    const std::uintptr_t skip = (8 - addr % 8) % 8;
    const std::int64_t words = region.size() > skip ? static_cast<std::int64_t>((region.size() - skip) / 8) : 0;
    add_pieces(reinterpret_cast<const std::uint64_t*>(addr + skip), words, pieces);
    given += region.size();
  }
  BandwidthResult r;
  r.llc_bytes = last_level_cache_bytes();
  for (const Piece& piece : pieces) r.bytes += static_cast<std::uint64_t>(piece.words) * 8;
  if (r.bytes < kMiB)
    fail("memory bandwidth: ", regions.size() == 1 ? "a region of " : "regions of ", given, " bytes ",
         regions.size() == 1 ? "is" : "are", " too small to measure memory (at least 1 MiB)");
  int passes_run = 0;
  const std::uint64_t sink = timed_passes(pieces, options, r, passes_run);
  // Arbitrary contents give no sum to check; the empty asm makes the compiler keep it (and the reads).
  asm volatile("" : : "r"(sink));
  return r;
}

}  // namespace fp4serve
