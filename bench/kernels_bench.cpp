// Kernel benchmarks. The headline: NVFP4 GEMM at M = 1 (decode) on Qwen3-30B-A3B expert shapes,
// per backend, as GB/s of weight bytes read (packed codes + block scales). "hot" reuses one
// matrix (it stays in L2/L3: the decode-arithmetic ceiling); "cold" cycles through 64 matrices
// (~56 MB, past the last-level cache: what a real decode step sees). The roofline is this
// machine's memory read bandwidth (util/memory_bandwidth.h), measured once at start in the same
// run; every GEMM/MoE benchmark reports its weight bytes per second as a fraction of it
// ("of_roofline"). Batched decode (M = 2 ... 16, cold; M = 2-4 also hot and dram, M = 16 hot)
// shares each weight read among M activation rows; nvfp4_m24 / _m64 / _m512: prefill-sized calls
// (an expert's share of a prompt, a prompt's attention projections; where amx-int8's tiles take
// over from the token groups); lm_head_30b_m1 / _m16: the BF16 lm_head (0.62 GB, from memory) of a
// one-token decode step (a stream at the memory's pace) and of a 16-sequence one; lm_head_397b_m16:
// Qwen3.5-397B-A17B's (2.03 GB) in a 16-sequence step; bf16_m512: a
// 512-token prompt through Qwen3.5-397B-A17B's BF16 linear-attention input projection (168 MB).
// attention_decode_30b (_397b: Qwen3.5's 15 full-attention layers): one decode step's attention
// over all 48 layers' cached keys and values at a given depth;
// attention_prefill_30b / _397b: one layer's attention for a 512-token prefill chunk at a depth
// (Qwen3-30B-A3B's 32/4 heads of 128, Qwen3.5-397B-A17B's 32/2 of 256); moe_decode_30b / _m16:
// one MoE layer on one token and on 16 (a batched step's experts, GB/s of the experts it used),
// taking turns over layers that together hold twice the last-level cache. amx_tile_rate/start and
// /end: the AMX unit's rate (ns per bf16 tile product) before and after the rest.
// Results and predictions: docs/perf.md.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"
#include "kernels/kv_cache.h"
#include "kernels/model_shapes.h"
#include "kernels/moe_traffic.h"
#include "kernels/random_data.h"
#include "synth/presets.h"
#include "kernels/registry.h"
#include "kernels/tile_rate.h"
#include "kernels/weight_rows.h"
#include "util/cpu_features.h"
#include "util/huge_pages.h"
#include "util/memory_bandwidth.h"
#include "util/thread_pool.h"

namespace {

using namespace fp4serve;
using namespace fp4serve::kernels;

// Measured on first use (before the first kernel benchmark runs, see main).
const BandwidthResult& roofline() {
  static const BandwidthResult r = measure_read_bandwidth();
  return r;
}

void report_roofline(benchmark::State& state, double bytes) {
  state.counters["of_roofline"] =
      benchmark::Counter(bytes / (roofline().best_gb_per_s * 1e9), benchmark::Counter::kIsRate);
}

// M = 1 decode GEMM; `copies` distinct matrices used round-robin.
void nvfp4_decode(benchmark::State& state, const Backend* b, std::int64_t n, std::int64_t k, int copies, std::int64_t m) {
  Rng rng(42);
  std::vector<std::unique_ptr<OwnedWeight>> ws;
  for (int i = 0; i < copies; ++i) ws.push_back(random_weight(rng, SchemeKind::NVFP4, DType::U8, n, k));
  // The matrices move into one arena on 2 MiB pages, as a model's mapped weights are
  // (util/huge_pages.h); each separately allocated < 1 MiB matrix would get 4 KiB pages.
  const std::size_t codes = static_cast<std::size_t>(n * k / 2), scales = static_cast<std::size_t>(n * k / 16);
  HugePageBuffer arena(static_cast<std::size_t>(copies) * (codes + scales), "kernels_bench weight arena");
  auto* at = static_cast<std::uint8_t*>(arena.data());
  for (auto& w : ws) {
    std::memcpy(at, w->w.data, codes);
    std::memcpy(at + codes, w->w.block_scales, scales);
    w->w.data = at;
    w->w.block_scales = at + codes;
    std::vector<std::uint8_t>().swap(w->data);  // the arena holds them now: 1.3 GiB, not twice that
    std::vector<std::uint8_t>().swap(w->scales);
    at += codes + scales;
  }
  const auto x = random_activations(rng, m, k);
  std::vector<float> y(static_cast<std::size_t>(m * n));
  std::size_t i = 0;
  for (auto _ : state) {
    b->fp4.gemm->run(x.data(), m, ws[i]->w, y.data(), Fp4Semantics::W4A16);
    benchmark::DoNotOptimize(y.data());
    i = (i + 1) % ws.size();
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * weight_bytes(ws[0]->w)));
  report_roofline(state, static_cast<double>(state.iterations() * weight_bytes(ws[0]->w)));
  state.counters["GFLOP/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * 2.0 * static_cast<double>(m * n * k),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// Dense BF16 GEMM at prefill / batch sizes (BF16 checkpoints, lm_heads): an n x k matrix, resident
// in L3 when small (2048 x 2048), read from memory when not (the lm_head).
// huge_pages: the weights copied into 2 MiB pages, as the model maps its checkpoint (over 4 KiB
// pages the one-token lm_head stream read 22 GB/s against 28: the TLB, not the kernel).
void bf16_gemm(benchmark::State& state, const Backend* b, std::int64_t n, std::int64_t k, std::int64_t m,
               bool huge_pages = false) {
  Rng rng(43);
  auto w = random_weight(rng, SchemeKind::Dense, DType::BF16, n, k);
  const auto x = random_activations(rng, m, k);
  std::vector<float> y(static_cast<std::size_t>(m * n));
  WeightMatrix weights = w->w;
  std::unique_ptr<HugePageBuffer> copy;
  if (huge_pages) {
    const auto bytes = static_cast<std::size_t>(n * k) * 2;
    copy = std::make_unique<HugePageBuffer>(bytes, "kernels_bench lm_head");
    std::memcpy(copy->data(), weights.data, bytes);
    weights.data = static_cast<const std::uint8_t*>(copy->data());
  }
  for (auto _ : state) {
    b->dense.gemm->run(x.data(), m, weights, y.data(), Fp4Semantics::W4A16);
    benchmark::DoNotOptimize(y.data());
  }
  state.counters["GFLOP/s"] = benchmark::Counter(static_cast<double>(state.iterations()) * 2.0 * static_cast<double>(m * n * k),
                                                 benchmark::Counter::kIsRate, benchmark::Counter::kIs1000);
}

// Qwen3-30B-A3B's MoE layer: 128 experts of 768 x 2048, top 8.
MoeShape moe_30b_shape() {
  MoeShape s;
  s.hidden = 2048;
  s.intermediate = 768;
  s.experts = 128;
  s.top_k = 8;
  s.norm_topk_prob = true;
  return s;
}

// Such layers of ~340 MB each (every expert distinct), enough of them to hold twice the
// last-level cache: one layer fitted the 480 MiB of a Xeon VM, so experts used in one iteration
// could still be cached in the next (docs/perf.md, session 30). Built once (≈ 1.2 GB of random
// weights) and shared by every backend's MoE benchmarks.
const std::vector<std::unique_ptr<OwnedMoe>>& moe_30b_layers() {
  static const std::vector<std::unique_ptr<OwnedMoe>> layers = [] {
    constexpr std::size_t kLayerBytes = std::size_t{400} << 20;
    const std::uint64_t llc = last_level_cache_bytes();
    const auto count = std::max<std::uint64_t>(2, (2 * llc + kLayerBytes - 1) / kLayerBytes);
    Rng rng(1);
    std::vector<std::unique_ptr<OwnedMoe>> v;
    for (std::uint64_t l = 0; l < count; ++l) v.push_back(random_moe(rng, moe_30b_shape(), kLayerBytes));
    return v;
  }();
  return layers;
}

// One Qwen3-30B-A3B MoE layer (128 experts, top 8) on m tokens, per backend: one token is a
// decode step's layer, 16 a 16-sequence batched step's (random routing uses ≈ 82 experts, each
// read once for its 1-4 tokens). Iterations take turns over 16 sets of activations, so each
// routes to other experts, and over the layers of moe_30b_layers, so the weights come from
// memory: with one set and one layer, one token's 8 experts (21 MB) stayed in the last-level
// cache and read 108 % of the roofline (session 29).
// Bytes: the router's (bf16) and those of the experts the calls used, as the MoE driver counts
// them (moe_traffic.h).
void moe_decode(benchmark::State& state, const Backend* b, std::int64_t m) {
  const MoeShape s = moe_30b_shape();
  const auto& moes = moe_30b_layers();
  const auto layers = static_cast<std::int64_t>(moes.size());
  Rng rng(2);
  constexpr std::int64_t kSets = 16;
  const auto x = random_activations(rng, kSets * m, s.hidden);
  std::vector<float> y(static_cast<std::size_t>(m * s.hidden));
  const MoeTraffic before = moe_traffic();
  std::int64_t turn = 0;
  for (auto _ : state) {
    const MoeLayer& layer = moes[static_cast<std::size_t>(turn % layers)]->layer;
    b->moe.moe->run(x.data() + (turn % kSets) * m * s.hidden, m, layer, y.data(), Fp4Semantics::W4A16);
    benchmark::DoNotOptimize(y.data());
    ++turn;
  }
  const MoeTraffic used = moe_traffic() - before;
  const auto bytes = static_cast<std::int64_t>(used.bytes + state.iterations() * s.experts * s.hidden * 2);
  state.SetBytesProcessed(bytes);
  state.counters["experts"] = used.calls == 0 ? 0.0 : static_cast<double>(used.experts) / static_cast<double>(used.calls);
  state.counters["layers"] = static_cast<double>(layers);
  report_roofline(state, static_cast<double>(bytes));
}

// An attention layout: layers, query heads, KV heads, head_dim.
struct AttentionLayout {
  std::int64_t layers, heads, kv_heads, dim;
  std::int64_t row() const { return kv_heads * dim; }
};
constexpr AttentionLayout kQwen3_30b{48, 32, 4, 128};
constexpr AttentionLayout kQwen35_397b{15, 32, 2, 256};  // its 15 full-attention layers of 60

// A cache of `positions` tokens of layout L in blocks of 16, laid out as the engine's (all layers
// of a block together), of `dtype` elements (--kv-cache-dtype), on 2 MiB pages (huge = true) or
// the heap's.
struct BenchKvCache {
  static constexpr std::int64_t kBlock = 16;
  AttentionLayout L;
  HugePageBuffer on_huge;
  std::vector<std::byte> on_heap;
  std::vector<const std::byte*> block_ptrs;

  BenchKvCache(const AttentionLayout& layout, std::int64_t positions, bool huge, DType dtype) : L(layout) {
    const std::int64_t blocks = (positions + kBlock - 1) / kBlock, block_elements = 2 * L.layers * kBlock * L.row();
    const auto bytes_per = static_cast<std::int64_t>(kv_element_bytes(dtype));
    const auto total = static_cast<std::size_t>(blocks * block_elements * bytes_per);
    std::byte* cache = nullptr;
    if (huge) {
      on_huge = HugePageBuffer(total, "kernels_bench KV cache");
      cache = static_cast<std::byte*>(on_huge.data());
    } else {
      on_heap.resize(total);
      cache = on_heap.data();
    }
    Rng rng(3);
    constexpr std::int64_t kFill = 1 << 16;
    const auto fill = random_activations(rng, 1, kFill);
    const auto elements = static_cast<std::int64_t>(total) / bytes_per;
    for (std::int64_t i = 0; i < elements; i += kFill)
      store_kv_row(cache + i * bytes_per, dtype, fill.data(), std::min(kFill, elements - i));
    for (std::int64_t i = 0; i < blocks; ++i) block_ptrs.push_back(cache + i * block_elements * bytes_per);
  }

  // m query tokens after `past` cached ones, layer 0.
  AttentionArgs args(const float* q, float* out, std::int64_t m, std::int64_t past, DType dtype) const {
    AttentionArgs a;
    a.q = q;
    a.out = out;
    a.kv_blocks = block_ptrs.data();
    a.kv_dtype = dtype;
    a.block_tokens = kBlock;
    a.m = m;
    a.past = past;
    a.num_heads = L.heads;
    a.num_kv_heads = L.kv_heads;
    a.head_dim = L.dim;
    a.scale = 1.0f / std::sqrt(static_cast<float>(L.dim));
    return a;
  }
  void point_at_layer(AttentionArgs& a, std::int64_t l) const {
    a.k_offset = 2 * l * kBlock * L.row();
    a.v_offset = (2 * l + 1) * kBlock * L.row();
  }
};

// One decode step's attention over every layer of layout L with `past` positions cached. Reports
// the cached keys and values read per second against the roofline.
void attention_decode(benchmark::State& state, const Backend* b, const AttentionLayout& layout, std::int64_t past, bool huge,
                      DType dtype) {
  const BenchKvCache cache(layout, past + 1, huge, dtype);
  const AttentionLayout& L = cache.L;
  Rng rng(4);
  const auto q = random_activations(rng, 1, L.heads * L.dim);
  std::vector<float> out(static_cast<std::size_t>(L.heads * L.dim));
  AttentionArgs a = cache.args(q.data(), out.data(), 1, past, dtype);
  for (auto _ : state) {
    for (std::int64_t l = 0; l < L.layers; ++l) {
      cache.point_at_layer(a, l);
      b->attention.attention->run(a);
    }
    benchmark::DoNotOptimize(out.data());
  }
  const double bytes = static_cast<double>(L.layers * 2 * (past + 1) * L.row() * static_cast<std::int64_t>(kv_element_bytes(dtype)));
  state.SetBytesProcessed(static_cast<std::int64_t>(static_cast<double>(state.iterations()) * bytes));
  report_roofline(state, static_cast<double>(state.iterations()) * bytes);
}

// One layer's attention of layout L for a prefill chunk of m tokens after `past` cached ones (a
// long prompt's later chunks: `serve --prefill-chunk`, bench -d). Reports GFLOP/s of the causal
// q.k and p.v products (2 * 2 * head_dim flops per query head and visible position).
void attention_prefill(benchmark::State& state, const Backend* b, const AttentionLayout& layout, std::int64_t m,
                       std::int64_t past, DType dtype) {
  const BenchKvCache cache(layout, past + m, true, dtype);
  const AttentionLayout& L = cache.L;
  Rng rng(5);
  const auto q = random_activations(rng, m, L.heads * L.dim);
  std::vector<float> out(static_cast<std::size_t>(m * L.heads * L.dim));
  AttentionArgs a = cache.args(q.data(), out.data(), m, past, dtype);
  cache.point_at_layer(a, 0);
  for (auto _ : state) {
    b->attention.attention->run(a);
    benchmark::DoNotOptimize(out.data());
  }
  const double visible = static_cast<double>(m) * static_cast<double>(past) + static_cast<double>(m * (m + 1) / 2);
  const double flops = 4.0 * static_cast<double>(L.dim * L.heads) * visible;
  state.counters["GFLOP/s"] = benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

// The roofline itself, measured again (best of 3 passes over >= 512 MiB, all pool threads).
void memory_read(benchmark::State& state) {
  for (auto _ : state) {
    const BandwidthResult r = measure_read_bandwidth();
    state.counters["best_GB/s"] = r.best_gb_per_s;
    state.counters["buffer_MiB"] = static_cast<double>(r.bytes >> 20);
    state.counters["threads"] = r.threads;
  }
}

// Start-up validation on Qwen3-30B-A3B shapes (auto: the first passing backend per family).
void validation_30b(benchmark::State& state) {
  const ModelConfig c = synth::preset_config(Arch::Qwen3Moe, "30b-a3b");
  BackendOptions o;
  o.inject_faults = "";
  for (auto _ : state) {
    auto sel = select_kernels(o, c, ResolvedQuantization{});
    double ref = 0;
    for (const auto& f : sel->report().families) ref += f.reference_seconds;
    state.counters["reference_s"] = ref;
  }
}

// The AMX unit's own rate (kernels/tile_rate.h: every kernel thread at once, the slowest thread's
// ns per bf16 tile product). On a shared VM it moved 2.5x between runs with nothing else running
// in the guest (docs/perf.md, session 37), and every AMX case moves with it, so it runs first and
// last: a filter such as 'amx_tile_rate|attention_prefill' brackets the cases it names.
void amx_tile_rate(benchmark::State& state) {
  double ns = 0.0;
  for (auto _ : state) ns += amx_tile_product_ns().value_or(0.0);
  state.counters["ns_per_product"] = ns / static_cast<double>(state.iterations());
}

bool register_all() {
  if (amx_tiles_usable()) benchmark::RegisterBenchmark("amx_tile_rate/start", amx_tile_rate)->UseRealTime();
  const std::int64_t shapes[2][2] = {{768, 2048}, {2048, 768}};  // gate/up, down (N x K)
  for (const Backend& b : compiled_backends()) {
    if (!cpu_features().missing(b.needs).empty()) continue;
    for (const auto& s : shapes) {
      const std::string shape = std::to_string(s[0]) + "x" + std::to_string(s[1]);
      // hot: L2; cold: 54 MiB, L3 on this VM (480 MiB); dram: 1.3 GiB, what a model's decode sees.
      for (const auto& [tag, copies] : {std::pair{"hot", 1}, std::pair{"cold", 64}, std::pair{"dram", 1536}}) {
        if (b.name == "reference" && copies > 1) continue;  // scalar: the cache level does not matter
        if (copies > 64 && s[0] != 768) continue;           // one shape is enough at 1.3 GiB
        benchmark::RegisterBenchmark(("nvfp4_m1/" + b.name + "/" + shape + "/" + tag).c_str(),
                                     [&b, s, copies = copies](benchmark::State& st) { nvfp4_decode(st, &b, s[0], s[1], copies, 1); })
            ->UseRealTime();
      }
    }
    if (b.name != "reference") {
      for (std::int64_t m : {2, 4, 6, 8, 12, 16}) {  // batched decode, cache-cold weights
        benchmark::RegisterBenchmark(("nvfp4_m" + std::to_string(m) + "/" + b.name + "/768x2048/cold").c_str(),
                                     [&b, m](benchmark::State& st) { nvfp4_decode(st, &b, 768, 2048, 64, m); })
            ->UseRealTime();
      }
      // A batched step's experts get 1-4 tokens each: from L2 (the loop's own pace) and from
      // memory (what the step sees), against m = 1 (docs/perf.md, session 29).
      for (std::int64_t m : {2, 3, 4})
        for (const auto& [tag, copies] : {std::pair{"hot", 1}, std::pair{"dram", 1536}})
          benchmark::RegisterBenchmark(("nvfp4_m" + std::to_string(m) + "/" + b.name + "/768x2048/" + tag).c_str(),
                                       [&b, m, copies = copies](benchmark::State& st) { nvfp4_decode(st, &b, 768, 2048, copies, m); })
              ->UseRealTime();
      // m = 16 from L2 as well: the cold case's gap to it is what the token groups' row prefetch
      // must close (docs/perf.md, session 23).
      benchmark::RegisterBenchmark(("nvfp4_m16/" + b.name + "/768x2048/hot").c_str(),
                                   [&b](benchmark::State& st) { nvfp4_decode(st, &b, 768, 2048, 1, 16); })
          ->UseRealTime();
      // Prefill sizes: 24 tokens (amx-int8's tiles against the token groups, just past where
      // they tie) and 512 (a prompt's attention projections; docs/perf.md, session 31).
      for (std::int64_t m : {24, 512})
        benchmark::RegisterBenchmark(("nvfp4_m" + std::to_string(m) + "/" + b.name + "/768x2048").c_str(),
                                     [&b, m](benchmark::State& st) { nvfp4_decode(st, &b, 768, 2048, 1, m); })
            ->UseRealTime();
      benchmark::RegisterBenchmark(("nvfp4_m64/" + b.name + "/768x2048").c_str(),
                                   [&b](benchmark::State& st) { nvfp4_decode(st, &b, 768, 2048, 1, 64); })
          ->UseRealTime();
      if (b.dense.present()) {
        for (std::int64_t m : {16, 64})
          benchmark::RegisterBenchmark(("bf16_m" + std::to_string(m) + "/" + b.name + "/2048x2048").c_str(),
                                       [&b, m](benchmark::State& st) { bf16_gemm(st, &b, 2048, 2048, m); })
              ->UseRealTime();
        // Qwen3.5-397B-A17B's BF16 linear-attention input projection (qkvz, 168 MB) for a
        // 512-token prompt: a dense prefill GEMM whose weights outgrow L2 many times over.
        benchmark::RegisterBenchmark(("bf16_m512/" + b.name + "/20480x4096").c_str(),
                                     [&b](benchmark::State& st) { bf16_gemm(st, &b, 20480, 4096, 512); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
        // Qwen3-30B-A3B's BF16 lm_head (0.62 GB, from memory) in a one-token decode step (in
        // 2 MiB pages) and in a 16-sequence one.
        benchmark::RegisterBenchmark(("lm_head_30b_m1/" + b.name).c_str(),
                                     [&b](benchmark::State& st) { bf16_gemm(st, &b, 151936, 2048, 1, true); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
        benchmark::RegisterBenchmark(("lm_head_30b_m16/" + b.name).c_str(),
                                     [&b](benchmark::State& st) { bf16_gemm(st, &b, 151936, 2048, 16); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
        // Qwen3.5-397B-A17B's BF16 lm_head (2.03 GB in 2 MiB pages, rows of 8 KB) in a 16-sequence
        // step: where the one-pass tiles' prefetch of the weight rows paid (docs/perf.md, session 41).
        benchmark::RegisterBenchmark(("lm_head_397b_m16/" + b.name).c_str(),
                                     [&b](benchmark::State& st) { bf16_gemm(st, &b, 248320, 4096, 16, true); })
            ->UseRealTime()
            ->Unit(benchmark::kMillisecond);
      }
      if (b.attention.present())
        for (std::int64_t past : {512, 2048, 8192})
          for (DType dtype : {DType::F32, DType::F16, DType::BF16})
            for (bool huge : {true, false}) {
              if (dtype != DType::F32 && !huge) continue;  // the page size was measured with f32 (session 13)
              benchmark::RegisterBenchmark(("attention_decode_30b/" + b.name + "/past:" + std::to_string(past) + "/" +
                                            std::string(kv_dtype_name(dtype)) + (huge ? "/2mib" : "/4kib"))
                                               .c_str(),
                                           [&b, past, huge, dtype](benchmark::State& st) { attention_decode(st, &b, kQwen3_30b, past, huge, dtype); })
                  ->UseRealTime()
                  ->Unit(benchmark::kMillisecond);
            }
      if (b.attention.present())
        for (std::int64_t past : {2048, 8192})  // Qwen3.5's 256-wide heads: the split decode in pieces
          benchmark::RegisterBenchmark(("attention_decode_397b/" + b.name + "/past:" + std::to_string(past) + "/f32/2mib").c_str(),
                                       [&b, past](benchmark::State& st) { attention_decode(st, &b, kQwen35_397b, past, true, DType::F32); })
              ->UseRealTime()
              ->Unit(benchmark::kMillisecond);
      if (b.attention.present())
        for (const auto& [model, layout] : {std::pair{"30b", &kQwen3_30b}, std::pair{"397b", &kQwen35_397b}})
          for (std::int64_t past : {0, 1536, 7680})
            benchmark::RegisterBenchmark(("attention_prefill_" + std::string(model) + "/" + b.name + "/m:512/past:" +
                                          std::to_string(past) + "/f32")
                                             .c_str(),
                                         [&b, layout = layout, past](benchmark::State& st) {
                                           attention_prefill(st, &b, *layout, 512, past, DType::F32);
                                         })
                ->UseRealTime()
                ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("moe_decode_30b/" + b.name).c_str(), [&b](benchmark::State& st) { moe_decode(st, &b, 1); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
      benchmark::RegisterBenchmark(("moe_decode_30b_m16/" + b.name).c_str(), [&b](benchmark::State& st) { moe_decode(st, &b, 16); })
          ->UseRealTime()
          ->Unit(benchmark::kMillisecond);
    }
  }
  benchmark::RegisterBenchmark("memory_read_bandwidth", memory_read)->Iterations(1)->UseRealTime()->Unit(benchmark::kMillisecond);
  benchmark::RegisterBenchmark("validation_30b_a3b", validation_30b)->Iterations(3)->UseRealTime()->Unit(benchmark::kMillisecond);
  if (amx_tiles_usable()) benchmark::RegisterBenchmark("amx_tile_rate/end", amx_tile_rate)->UseRealTime();
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  register_all();
  const BandwidthResult& r = roofline();
  std::printf("memory read roofline: %.2f GB/s (best of %zu passes over %llu MiB, %d threads)\n", r.best_gb_per_s,
              r.pass_gb_per_s.size(), static_cast<unsigned long long>(r.bytes >> 20), r.threads);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
