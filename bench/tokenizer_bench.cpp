// Tokenizer throughput: fp4serve's encode in MB/s next to Hugging Face tokenizers' single-threaded
// figure on the same texts, measured in the same run (through python3, when `tokenizers` is
// installed), plus the time to load the 11 MB Qwen3 tokenizer.json.
//
//   tokenizer_bench [--benchmark_filter=...] [--corpus FILE.jsonl] [--tokenizer tokenizer.json]
//
// Defaults: tests/data/tokenizer/qwen3_corpus.jsonl and assets/qwen3-tokenizer/tokenizer.json.
#include <benchmark/benchmark.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace {

using fp4serve::tokenizer::Tokenizer;

// The repository root, found from this file's path so the defaults work from any build directory.
const std::filesystem::path kRoot = std::filesystem::path(__FILE__).parent_path().parent_path();
std::string g_tokenizer = (kRoot / "assets/qwen3-tokenizer/tokenizer.json").string();
std::string g_corpus = (kRoot / "tests/data/tokenizer/qwen3_corpus.jsonl").string();

const std::vector<std::string>& texts() {
  static const std::vector<std::string> t = [] {
    std::vector<std::string> out;
    std::ifstream in(g_corpus);
    std::string line;
    while (std::getline(in, line)) out.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
    if (out.empty()) throw std::runtime_error("no texts in " + g_corpus);
    return out;
  }();
  return t;
}

std::size_t total_bytes() {
  std::size_t n = 0;
  for (const auto& t : texts()) n += t.size();
  return n;
}

const Tokenizer& tokenizer() {
  static const Tokenizer tok = Tokenizer::from_file(g_tokenizer);
  return tok;
}

void BM_Load(benchmark::State& state) {
  for (auto _ : state) {
    Tokenizer tok = Tokenizer::from_file(g_tokenizer);
    benchmark::DoNotOptimize(tok);
  }
}
BENCHMARK(BM_Load)->Unit(benchmark::kMillisecond)->Iterations(3);

// Encodes every corpus text once per iteration; the word cache is warm after the first, as it is
// for Hugging Face in the comparison below.
void BM_EncodeCorpus(benchmark::State& state) {
  const Tokenizer& tok = tokenizer();
  std::size_t tokens = 0;
  for (auto _ : state) {
    for (const auto& t : texts()) {
      auto ids = tok.encode(t);
      tokens += ids.size();
      benchmark::DoNotOptimize(ids);
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * total_bytes()));
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsRate);
}
BENCHMARK(BM_EncodeCorpus)->Unit(benchmark::kMillisecond);

// A cold cache every iteration: the cost of words never seen before.
void BM_EncodeCorpusColdCache(benchmark::State& state) {
  for (auto _ : state) {
    state.PauseTiming();
    Tokenizer tok = Tokenizer::from_file(g_tokenizer);
    state.ResumeTiming();
    for (const auto& t : texts()) benchmark::DoNotOptimize(tok.encode(t));
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * total_bytes()));
}
BENCHMARK(BM_EncodeCorpusColdCache)->Unit(benchmark::kMillisecond)->Iterations(2);

void BM_DecodeStreaming(benchmark::State& state) {
  const Tokenizer& tok = tokenizer();
  std::vector<std::vector<fp4serve::tokenizer::TokenId>> all;
  for (const auto& t : texts()) all.push_back(tok.encode(t));
  for (auto _ : state) {
    fp4serve::tokenizer::StreamDecoder stream(tok);
    for (const auto& ids : all) {
      stream.reset();
      for (const auto id : ids) benchmark::DoNotOptimize(stream.push(id));
      benchmark::DoNotOptimize(stream.finish());
    }
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * total_bytes()));
}
BENCHMARK(BM_DecodeStreaming)->Unit(benchmark::kMillisecond);

// Hugging Face tokenizers, single-threaded (Tokenizer.encode in a loop; batch encoding would use
// every core), timed the same way: warm-up pass, then best of several passes.
double huggingface_mb_per_s() {
  const std::string script =
      "import json, sys, time\n"
      "from tokenizers import Tokenizer\n"
      "tok = Tokenizer.from_file(sys.argv[1])\n"
      "texts = [json.loads(l)['text'] for l in open(sys.argv[2], encoding='utf-8')]\n"
      "size = sum(len(t.encode('utf-8')) for t in texts)\n"
      "for t in texts: tok.encode(t, add_special_tokens=False)\n"
      "best = 1e9\n"
      "for _ in range(5):\n"
      "    t0 = time.perf_counter()\n"
      "    for t in texts: tok.encode(t, add_special_tokens=False)\n"
      "    best = min(best, time.perf_counter() - t0)\n"
      "print(size / best / 1e6)\n";
  const std::string path = "/tmp/fp4serve_hf_tokenizer_bench.py";
  std::ofstream(path) << script;
  const std::string cmd = "RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false python3 " + path + " '" + g_tokenizer +
                          "' '" + g_corpus + "' 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return -1;
  char buf[128] = {};
  const bool got = std::fgets(buf, sizeof buf, pipe) != nullptr;
  const int rc = pclose(pipe);
  if (!got || rc != 0) return -1;
  return std::stod(buf);
}

}  // namespace

int main(int argc, char** argv) {
  // Our own flags first; the rest goes to Google Benchmark.
  std::vector<char*> rest{argv[0]};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--corpus" && i + 1 < argc) {
      g_corpus = argv[++i];
    } else if (a == "--tokenizer" && i + 1 < argc) {
      g_tokenizer = argv[++i];
    } else {
      rest.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(rest.size());
  benchmark::Initialize(&n, rest.data());
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();

  // The headline comparison, measured the same way for both: best of five warm passes.
  const Tokenizer& tok = tokenizer();
  for (const auto& t : texts()) (void)tok.encode(t);
  double best = 1e9;
  for (int pass = 0; pass < 5; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    for (const auto& t : texts()) benchmark::DoNotOptimize(tok.encode(t));
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  const double ours = static_cast<double>(total_bytes()) / best / 1e6;
  const double theirs = huggingface_mb_per_s();
  std::cout << "\nencode throughput on " << g_corpus << " (" << total_bytes() << " bytes, " << texts().size()
            << " texts)\n  fp4serve:                          " << ours << " MB/s\n";
  if (theirs > 0) {
    std::cout << "  Hugging Face tokenizers (1 thread): " << theirs << " MB/s\n  ratio: " << ours / theirs << "x\n";
  } else {
    std::cout << "  Hugging Face tokenizers: not measured (python3 with `tokenizers` not available)\n";
  }
  return 0;
}
