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

#include "tokenizer/chat_template.h"
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

// Rendering the Qwen3 chat template for a tool-using conversation (what the server does per request).
void BM_RenderQwen3ChatTemplate(benchmark::State& state) {
  const auto tmpl =
      fp4serve::tokenizer::ChatTemplate::from_model_dir(std::filesystem::path(g_tokenizer).parent_path());
  fp4serve::tokenizer::ChatRequest r;
  r.messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is the weather in Paris and in Tokyo?"},
    {"role": "assistant", "content": "", "reasoning_content": "Two cities, two calls.",
     "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Paris"}}},
                    {"type": "function", "function": {"name": "get_weather", "arguments": {"city": "Tokyo"}}}]},
    {"role": "tool", "content": "{\"temp\": 21}"},
    {"role": "tool", "content": "{\"temp\": 28}"},
    {"role": "assistant", "content": "Paris is 21 °C and Tokyo 28 °C."},
    {"role": "user", "content": "Thanks!"}])");
  r.tools = nlohmann::ordered_json::parse(R"([{"type": "function", "function": {"name": "get_weather",
    "description": "Current weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
    "required": ["city"]}}}])");
  r.add_generation_prompt = true;
  std::size_t bytes = 0;
  for (auto _ : state) {
    const std::string prompt = tmpl.render(r);
    bytes += prompt.size();
    benchmark::DoNotOptimize(prompt);
  }
  state.SetBytesProcessed(static_cast<std::int64_t>(bytes));
}
BENCHMARK(BM_RenderQwen3ChatTemplate)->Unit(benchmark::kMicrosecond);

// Hugging Face tokenizers, single-threaded (Tokenizer.encode in a loop; batch encoding would use
// every core), timed the same way as ours: warm-up pass, then best of five. Two figures: every
// corpus text encoded separately (per-call overhead included, as a server sees short prompts), and
// the whole corpus as one document. Returns {-1, -1} when python3 or `tokenizers` is missing.
std::pair<double, double> huggingface_mb_per_s() {
  const std::string script =
      "import json, sys, time\n"
      "from tokenizers import Tokenizer\n"
      "tok = Tokenizer.from_file(sys.argv[1])\n"
      "texts = [json.loads(l)['text'] for l in open(sys.argv[2], encoding='utf-8')]\n"
      "doc = '\\n'.join(texts)\n"
      "def best(f):\n"
      "    f()\n"
      "    b = 1e9\n"
      "    for _ in range(5):\n"
      "        t0 = time.perf_counter(); f(); b = min(b, time.perf_counter() - t0)\n"
      "    return b\n"
      "size = len(doc.encode('utf-8'))\n"
      "each = best(lambda: [tok.encode(t, add_special_tokens=False) for t in texts])\n"
      "whole = best(lambda: tok.encode(doc, add_special_tokens=False))\n"
      "print(sum(len(t.encode('utf-8')) for t in texts) / each / 1e6, size / whole / 1e6)\n";
  const std::string path = "/tmp/fp4serve_hf_tokenizer_bench.py";
  std::ofstream(path) << script;
  const std::string cmd = "RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false python3 " + path + " '" + g_tokenizer +
                          "' '" + g_corpus + "' 2>/dev/null";
  FILE* pipe = popen(cmd.c_str(), "r");
  if (!pipe) return {-1, -1};
  char buf[256] = {};
  const bool got = std::fgets(buf, sizeof buf, pipe) != nullptr;
  const int rc = pclose(pipe);
  double each = -1, whole = -1;
  if (!got || rc != 0 || std::sscanf(buf, "%lf %lf", &each, &whole) != 2) return {-1, -1};
  return {each, whole};
}

// Best of five warm passes of `f`, in seconds.
template <class F>
double best_of_five(F&& f) {
  f();
  double best = 1e9;
  for (int pass = 0; pass < 5; ++pass) {
    const auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
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

  // The headline comparison, measured the same way for both.
  const Tokenizer& tok = tokenizer();
  std::string doc;
  for (const auto& t : texts()) doc += (doc.empty() ? "" : "\n") + t;
  const double each = static_cast<double>(total_bytes()) / 1e6 /
                      best_of_five([&] { for (const auto& t : texts()) benchmark::DoNotOptimize(tok.encode(t)); });
  const double whole = static_cast<double>(doc.size()) / 1e6 / best_of_five([&] { benchmark::DoNotOptimize(tok.encode(doc)); });
  const auto [hf_each, hf_whole] = huggingface_mb_per_s();
  std::cout << "\nencode throughput, MB/s, single thread (" << g_corpus << ": " << texts().size() << " texts, "
            << total_bytes() << " bytes)\n"
            << "                                      each text   one document\n"
            << "  fp4serve                            " << each << "     " << whole << "\n";
  if (hf_each > 0) {
    std::cout << "  Hugging Face tokenizers (Python)    " << hf_each << "     " << hf_whole << "\n"
              << "  fp4serve / Hugging Face             " << each / hf_each << "x     " << whole / hf_whole << "x\n";
  } else {
    std::cout << "  Hugging Face tokenizers: not measured (python3 with `tokenizers` not available)\n";
  }
  return 0;
}
