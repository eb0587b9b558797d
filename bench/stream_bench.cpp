// Does a backend's NVFP4 GEMV (m = 1) stream at the memory probe's rate? Over 1.3 GiB of
// anonymous 2 MiB pages, as one call, as 768-row matrices (a 30b-a3b expert projection per
// call) and as 128- or 512-row slices handed out by one parallel_for (the MoE decode pattern).
// Best of 3 passes after a warm-up; results in docs/perf.md (sessions 17 and 28).
//   stream_bench [BACKEND [FILE]]   (default amx-int8 where it runs, else avx512-int8, avx2-int8;
//   FILE: read the codes from the first 1.2 GB of a file mapped as the model maps its checkpoint)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <memory>
#include <vector>

#include "kernels/backend.h"
#include "kernels/grouped_moe.h"
#include "util/cpu_features.h"
#include "util/huge_pages.h"
#include "util/mapped_file.h"
#include "util/memory_bandwidth.h"
#include "util/thread_pool.h"

using namespace fp4serve;
using namespace fp4serve::kernels;

namespace {

int run(int argc, char** argv) {
  const char* name = argc > 1 ? argv[1] : nullptr;
  if (name == nullptr)
    for (const char* candidate : {"amx-int8", "avx512-int8", "avx2-int8"}) {
      const Backend* c = find_backend(candidate);
      if (c != nullptr && cpu_features().missing(c->needs).empty()) {
        name = candidate;
        break;
      }
    }
  if (name == nullptr) name = "reference";
  const Backend* b = find_backend(name);
  if (b == nullptr || !b->fp4.present()) {
    std::fprintf(stderr, "stream_bench: no NVFP4 backend named '%s'\n", name);
    return 2;
  }
  if (!cpu_features().missing(b->needs).empty()) {
    std::fprintf(stderr, "stream_bench: this CPU cannot run backend '%s'\n", name);
    return 2;
  }
  const std::int64_t k = 2048, rows = 1536 * 768;
  const std::size_t code_bytes = rows * k / 2, scale_bytes = rows * k / 16;
  const HugePageBuffer buffer(code_bytes + scale_bytes, "stream_bench weights");
  auto* mem = static_cast<std::uint8_t*>(buffer.data());
  std::memset(mem + code_bytes, 0x38, scale_bytes);
  // With a file, the codes are its first 1.2 GB as mapped for the model (its page cache, in 2 MiB
  // pages where the kernel gives them), whatever they hold; the scales stay in the buffer, whose
  // code part is then never touched.
  std::unique_ptr<MappedFile> file;
  const std::uint8_t* codes = mem;
  if (argc > 2) {
    file = std::make_unique<MappedFile>(argv[2]);
    if (file->size() < code_bytes) {
      std::fprintf(stderr, "stream_bench: %s holds %zu bytes, fewer than the %zu the codes need\n", argv[2], file->size(), code_bytes);
      return 2;
    }
    codes = file->bytes().data();
  } else {
    for (std::size_t i = 0; i < code_bytes; ++i) mem[i] = static_cast<std::uint8_t>(i * 2654435761u >> 13);
  }
  std::vector<float> x(k), y(rows);
  for (std::int64_t i = 0; i < k; ++i) x[i] = static_cast<float>((i * 37) % 17) - 8.0f;
  WeightMatrix w;
  w.kind = SchemeKind::NVFP4;
  w.dtype = DType::U8;
  w.n = rows;
  w.k = k;
  w.data = codes;
  w.block_scales = mem + code_bytes;
  const GemmKernel* g = b->fp4.gemm;
  auto view = [&w](std::int64_t r0, std::int64_t r1) { return weight_rows_view(w, r0, r1); };
  const double bytes = static_cast<double>(code_bytes + scale_bytes);
  auto timeit = [&](const char* what, auto&& fn) {
    double best = 1e9;
    for (int pass = 0; pass < 4; ++pass) {
      const auto t0 = std::chrono::steady_clock::now();
      fn();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (pass > 0 && s < best) best = s;
    }
    std::printf("%-44s %6.2f GB/s\n", what, bytes / best / 1e9);
  };
  const BandwidthResult probe = measure_read_bandwidth();
  std::printf("%s; probe %.2f GB/s (median %.2f)\n", name, probe.best_gb_per_s, probe.median_gb_per_s);
  timeit("one call over 1.18 M rows", [&] { g->run(x.data(), 1, w, y.data(), Fp4Semantics::W4A16); });
  timeit("768-row calls (gate/up shape)", [&] {
    for (std::int64_t r = 0; r < rows; r += 768) g->run(x.data(), 1, view(r, r + 768), y.data() + r, Fp4Semantics::W4A16);
  });
  for (std::int64_t slice : {128, 512}) {
    char label[64];
    std::snprintf(label, sizeof label, "%lld-row slices, 8 experts x 2 per parallel_for", static_cast<long long>(slice));
    timeit(label, [&] {
      const std::int64_t per_job = 16 * 768;  // 8 experts x gate + up
      for (std::int64_t j0 = 0; j0 < rows; j0 += per_job) {
        const std::int64_t tasks = per_job / slice;
        parallel_for(tasks, 1, [&](std::int64_t t0, std::int64_t t1) {
          for (std::int64_t t = t0; t < t1; ++t) {
            const std::int64_t r = j0 + t * slice;
            g->run(x.data(), 1, view(r, r + slice), y.data() + r, Fp4Semantics::W4A16);
          }
        });
      }
    });
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {  // e.g. the 1.3 GiB buffer cannot be mapped
    std::fprintf(stderr, "stream_bench: %s\n", e.what());
    return 1;
  }
}
