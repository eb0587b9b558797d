// `fp4serve bench`: prefill and decode throughput of a checkpoint, like llama-bench, with this
// machine's memory read bandwidth measured in the same run so decode is shown against its
// roofline (bandwidth / bytes a decoded token moves: the weights it reads and, in a hybrid model,
// the linear-attention state it reads and writes back).
//
//   fp4serve bench -m DIR [-p 512] [-n 128] [-d 0] [-t THREADS] [--batch 1,4,16] [--reps 3] [--json]
//                  [--bandwidth-mib N] [--bandwidth-seconds S] [--check-weights] [--w4a4] [backend flags]
//
// Tests (each repeated --reps times; median, min, max, standard deviation reported):
//   pp<p>          one sequence, one forward over p prompt tokens (tokens/s = p / time)
//   tg<n> @ b<B>   B sequences decoding together from an empty cache: n steps, each one
//                  CausalLM::forward over B one-token chunks (aggregate tokens/s = B * n / time)
//   -d D           both tests start from D tokens already in each sequence's cache (llama-bench's
//                  -d; names "pp512 @ d4096"): prefilled once, untimed, into one sequence and
//                  copied to the others; every repetition starts from that context again.
// Also: the time from the start of loading to the first token of a 16-token prompt (weights
// mapped, kernels validated, tokenizer read, as `run` and `serve` load; prefill, argmax), and resident memory (VmRSS / VmHWM) against the
// checkpoint's weight bytes plus the KV cache bench allocated. Where AMX runs, the tile unit's rate before and after the tests
// (kernels/tile_rate.h): on a shared VM it moved 2.5x between minutes, and prefill on tiles with it.
//
// The roofline's bandwidth is read beside the batch-1 decode test: before each repetition and
// after the last, three passes over a sample of the weights a decode step reads, as many bytes
// as the step (model/decode_read_sample.h: the lm_head whole, pieces of the rest), which are
// resident, so the probe allocates nothing. On a shared VM the bandwidth changes by 1.5-2x from
// one spell of seconds to the next (docs/perf.md, sessions 23-24): a probe taken after all the
// tests measured another spell than the decode in many runs (127 % and 46 % of the roofline in
// two runs of the same build). The machine's own probe still runs last, after the memory
// figures so its buffer is not counted as the model's, for at least --bandwidth-seconds; it is
// the roofline when there is no batch-1 decode test or the lm_head is under 64 MiB (too close
// to a last-level cache to measure memory).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli/app.h"
#include "cli/load_notes.h"
#include "engine/runtime.h"
#include "kernels/cli_options.h"
#include "kernels/moe_traffic.h"
#include "kernels/registry.h"
#include "kernels/tile_rate.h"
#include "kernels/weight_rows.h"
#include "model/causal_lm.h"
#include "model/checkpoint_summary.h"
#include "model/decode_read_sample.h"
#include "model/model_weights.h"
#include "util/cpu_features.h"
#include "util/cpu_steal.h"
#include "util/error.h"
#include "util/huge_pages.h"
#include "util/median.h"
#include "util/memory_bandwidth.h"
#include "util/progress_bar.h"
#include "util/thread_pool.h"

namespace fp4serve::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

struct BenchArgs {
  std::string model_dir;
  std::int64_t prompt = 512;
  std::int64_t generate = 128;
  std::int64_t depth = 0;
  int threads = 0;  // 0: the pool's default (FP4SERVE_THREADS or every CPU)
  std::string batch = "1";
  int reps = 3;
  bool json = false;
  std::uint64_t bandwidth_mib = 0;  // 0: the default buffer (well past the last-level cache)
  double bandwidth_seconds = 2.0;   // timed passes at least this long (and at least 3)
  bool check_weights = false;
  kernels::BackendOptions backends;
};

// "1,4,16" -> {1, 4, 16}; each from 1 to 256, no repeats.
std::vector<std::int64_t> parse_batches(const std::string& text) {
  std::vector<std::int64_t> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    std::size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size()) fail("--batch: '", item, "' is not a number (expected e.g. 1,4,16)");
    if (v < 1 || v > 256) fail("--batch: ", v, " is out of range (1..256 sequences)");
    if (std::find(out.begin(), out.end(), v) != out.end()) fail("--batch: ", v, " is listed twice");
    out.push_back(v);
  }
  if (out.empty()) fail("--batch: no batch sizes in '", text, "'");
  return out;
}

void check_args(const BenchArgs& a) {
  if (a.prompt < 0 || a.prompt > 65536) fail("-p/--n-prompt must be 0..65536 tokens, got ", a.prompt);
  if (a.generate < 0 || a.generate > 65536) fail("-n/--n-gen must be 0..65536 tokens, got ", a.generate);
  if (a.prompt == 0 && a.generate == 0) fail("-p and -n are both 0: nothing to measure");
  if (a.depth < 0 || a.depth > 65536) fail("-d/--n-depth must be 0..65536 tokens, got ", a.depth);
  if (a.reps < 1 || a.reps > 1000) fail("--reps must be 1..1000, got ", a.reps);
  if (a.threads < 0 || a.threads > 1024) fail("-t/--threads must be 1..1024 (or 0: the default), got ", a.threads);
  if (a.bandwidth_mib > (std::uint64_t{1} << 20)) fail("--bandwidth-mib ", a.bandwidth_mib, " is more than 1 TiB");
  if (!(a.bandwidth_seconds >= 0.0 && a.bandwidth_seconds <= 60.0))
    fail("--bandwidth-seconds must be 0..60, got ", a.bandwidth_seconds);
}

// The pool reads FP4SERVE_THREADS when first used; bench sets it before anything runs a kernel.
void set_threads(int threads) {
  if (threads == 0) return;
  ::setenv("FP4SERVE_THREADS", std::to_string(threads).c_str(), 1);
  if (global_thread_pool().size() != threads)
    fail("-t ", threads, ": the kernel thread pool was already started with ", global_thread_pool().size(), " threads");
}

struct Stats {
  double median = 0, min = 0, max = 0, stddev = 0;
  std::vector<double> samples;
};

Stats stats_of(std::vector<double> v) {
  Stats s;
  s.samples = v;
  if (v.empty()) return s;
  const std::size_t n = v.size();
  s.median = median_of(v);
  s.min = *std::min_element(v.begin(), v.end());
  s.max = *std::max_element(v.begin(), v.end());
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(n);
  double var = 0;
  for (double x : v) var += (x - mean) * (x - mean);
  s.stddev = n > 1 ? std::sqrt(var / static_cast<double>(n - 1)) : 0.0;
  return s;
}

// Memory of the sequences bench runs: KV blocks (and the fixed state of linear-attention
// layers), allocated once per test and reused across repetitions.
class Sequences {
 public:
  static constexpr std::int64_t kBlockTokens = 16;

  // Bytes of one sequence's state with room for max_tokens: its KV blocks, then its fixed state.
  static std::int64_t bytes_per_sequence(const StateSpec& spec, std::int64_t max_tokens) {
    const std::int64_t blocks = (max_tokens + kBlockTokens - 1) / kBlockTokens;
    return blocks * spec.kv_block_bytes(kBlockTokens) + spec.fixed_state_floats() * static_cast<std::int64_t>(sizeof(float));
  }

  Sequences(const StateSpec& spec, std::int64_t count, std::int64_t max_tokens) : spec_(spec) {
    const std::int64_t blocks = (max_tokens + kBlockTokens - 1) / kBlockTokens;
    const std::int64_t per_seq = bytes_per_sequence(spec, max_tokens);
    per_seq_ = static_cast<std::size_t>(per_seq);
    storage_ = HugePageBuffer(static_cast<std::size_t>(count * per_seq), "bench KV cache");  // zeros
    seqs_.resize(static_cast<std::size_t>(count));
    for (std::int64_t s = 0; s < count; ++s) {
      Seq& q = seqs_[static_cast<std::size_t>(s)];
      std::byte* base = data() + s * per_seq;
      for (std::int64_t b = 0; b < blocks; ++b) q.blocks.push_back(base + b * spec.kv_block_bytes(kBlockTokens));
      // A block's bytes are a multiple of 4 (K and V), so the fixed state stays float-aligned.
      auto* fixed = reinterpret_cast<float*>(base + blocks * spec.kv_block_bytes(kBlockTokens));
      for (std::int64_t l = 0; l < spec.linear_layers; ++l) {
        q.conv.push_back(fixed);
        fixed += spec.conv_state_floats;
        q.recurrent.push_back(fixed);
        fixed += spec.recurrent_state_floats;
      }
      q.state.kv_blocks = q.blocks;
      q.state.kv_dtype = spec.kv_dtype;
      q.state.block_tokens = kBlockTokens;
      q.state.conv_state = q.conv;
      q.state.recurrent_state = q.recurrent;
    }
  }
  // Back to the start: past = the start's depth (0 unless set_start), the linear-attention
  // state as it was there (keys and values past `past` are never read, only overwritten).
  void reset() {
    for (Seq& q : seqs_) {
      q.state.past = start_past_;
      std::size_t at = 0;
      for (std::size_t l = 0; l < q.conv.size(); ++l) {
        restore(q.conv[l], spec_.conv_state_floats, at);
        restore(q.recurrent[l], spec_.recurrent_state_floats, at);
      }
    }
  }
  // Sequence 0 as it is now (its `past` tokens cached) becomes every sequence's start.
  void set_start() {
    const SequenceState& first = seqs_.front().state;
    for (std::size_t s = 1; s < seqs_.size(); ++s) std::copy(data(), data() + per_seq_, data() + s * per_seq_);
    start_state_.clear();
    const Seq& q = seqs_.front();
    for (std::size_t l = 0; l < q.conv.size(); ++l) {
      start_state_.insert(start_state_.end(), q.conv[l], q.conv[l] + spec_.conv_state_floats);
      start_state_.insert(start_state_.end(), q.recurrent[l], q.recurrent[l] + spec_.recurrent_state_floats);
    }
    start_past_ = first.past;
  }
  SequenceState& state(std::int64_t s) { return seqs_[static_cast<std::size_t>(s)].state; }
  std::uint64_t bytes() const { return storage_.size(); }

 private:
  struct Seq {
    std::vector<std::byte*> blocks;
    std::vector<float*> conv, recurrent;
    SequenceState state;
  };
  // n floats of the start's state from start_state_[at] (zeros without a start), at += n.
  void restore(float* p, std::int64_t n, std::size_t& at) const {
    if (start_state_.empty()) {
      std::fill(p, p + n, 0.0f);
      return;
    }
    std::copy(start_state_.begin() + static_cast<std::ptrdiff_t>(at), start_state_.begin() + static_cast<std::ptrdiff_t>(at + n), p);
    at += static_cast<std::size_t>(n);
  }

  StateSpec spec_;
  std::byte* data() const { return static_cast<std::byte*>(storage_.data()); }

  // 2 MiB pages, as the engine's KV slabs (engine/state_pool.h).
  HugePageBuffer storage_;
  std::size_t per_seq_ = 0;  // bytes
  std::vector<Seq> seqs_;
  std::int64_t start_past_ = 0;
  std::vector<float> start_state_;  // conv, recurrent per linear layer of sequence 0 at the start
};

// Deterministic prompt tokens spread over the vocabulary (no tokenizer needed).
std::vector<std::int32_t> prompt_tokens(std::int64_t n, std::int64_t vocab) {
  std::vector<std::int32_t> t(static_cast<std::size_t>(n));
  std::uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& v : t) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    v = static_cast<std::int32_t>((x >> 33) % static_cast<std::uint64_t>(vocab));
  }
  return t;
}

// Greedy next token; an Error when the logits are not finite (a broken kernel must not be timed).
std::int32_t argmax(std::span<const float> row, const char* what) {
  std::size_t best = 0;
  for (std::size_t i = 0; i < row.size(); ++i) {
    if (!std::isfinite(row[i])) fail("bench: non-finite logits during ", what, " (token ", i, ")");
    if (row[i] > row[best]) best = i;
  }
  return static_cast<std::int32_t>(best);
}

// One forward of `tokens` on sequence 0 from the start; returns its first generated token.
std::int32_t prefill(const CausalLM& model, Sequences& seqs, const std::vector<std::int32_t>& tokens, std::vector<float>& logits) {
  seqs.reset();
  SequenceChunk chunk;
  chunk.tokens = tokens;
  chunk.state = &seqs.state(0);
  chunk.logits = LogitsFor::LastPosition;
  model.forward({&chunk, 1}, {logits.data(), static_cast<std::size_t>(model.vocab_size())});
  return argmax({logits.data(), static_cast<std::size_t>(model.vocab_size())}, "prefill");
}

// The depth's context into sequence 0, kDepthChunk tokens per forward as llama-bench's
// micro-batches (and serve's --prefill-chunk) go: one forward over thousands of tokens would hold
// gigabytes of activations that no serving step holds, and the memory line would count them.
constexpr std::int64_t kDepthChunk = 512;
void prefill_in_chunks(const CausalLM& model, Sequences& seqs, const std::vector<std::int32_t>& tokens) {
  seqs.reset();
  SequenceState& state = seqs.state(0);
  const auto total = static_cast<std::int64_t>(tokens.size());
  for (std::int64_t at = 0; at < total; at += kDepthChunk) {
    SequenceChunk chunk;
    chunk.tokens = std::span<const std::int32_t>(tokens).subspan(static_cast<std::size_t>(at),
                                                                  static_cast<std::size_t>(std::min(kDepthChunk, total - at)));
    chunk.state = &state;
    chunk.logits = LogitsFor::None;
    model.forward({&chunk, 1}, {});
    state.past += static_cast<std::int64_t>(chunk.tokens.size());
  }
}

constexpr std::uint64_t kBesideProbeMinBytes = std::uint64_t{64} << 20;

// n decode steps of `batch` sequences from the start; returns the seconds taken.
double decode(const CausalLM& model, Sequences& seqs, std::int64_t batch, std::int64_t n, std::vector<float>& logits) {
  seqs.reset();
  const std::int64_t vocab = model.vocab_size();
  std::vector<std::int32_t> next = prompt_tokens(batch, vocab);
  std::vector<SequenceChunk> chunks(static_cast<std::size_t>(batch));
  const auto start = Clock::now();
  for (std::int64_t step = 0; step < n; ++step) {
    for (std::int64_t s = 0; s < batch; ++s) {
      SequenceChunk& c = chunks[static_cast<std::size_t>(s)];
      c.tokens = {&next[static_cast<std::size_t>(s)], 1};
      c.state = &seqs.state(s);
      c.logits = LogitsFor::LastPosition;
    }
    model.forward(chunks, {logits.data(), static_cast<std::size_t>(batch * vocab)});
    for (std::int64_t s = 0; s < batch; ++s) {
      next[static_cast<std::size_t>(s)] =
          argmax({logits.data() + s * vocab, static_cast<std::size_t>(vocab)}, "decode");
      ++seqs.state(s).past;
    }
  }
  return seconds_since(start);
}

// MemAvailable from /proc/meminfo in bytes (0 where unavailable).
std::uint64_t available_memory_bytes() {
  std::ifstream f("/proc/meminfo");
  std::string key;
  std::uint64_t kb = 0;
  while (f >> key) {
    if (key == "MemAvailable:") {
      f >> kb;
      return kb * 1024;
    }
    f.ignore(std::numeric_limits<std::streamsize>::max(), '\n');
  }
  return 0;
}

// VmRSS and VmHWM of this process in bytes, from /proc/self/status (0 where unavailable).
std::pair<std::uint64_t, std::uint64_t> resident_memory() {
  std::ifstream f("/proc/self/status");
  std::string key;
  std::uint64_t rss = 0, hwm = 0;
  while (f >> key) {
    if (key == "VmRSS:") f >> rss;
    else if (key == "VmHWM:") f >> hwm;
    f.ignore(1 << 12, '\n');
  }
  return {rss << 10, hwm << 10};
}

struct TestResult {
  std::string name;  // "pp512", "tg128"
  std::int64_t batch = 1;
  std::int64_t tokens = 0;  // per repetition, all sequences
  Stats seconds, tokens_per_s;
  // Decode tests: the timed steps and what their MoE calls read of the routed experts.
  std::int64_t steps = 0;
  kernels::MoeTraffic traffic;
};

// A decode test's own roofline: a step of B sequences reads the weights outside the routed
// experts once and each expert any of the B tokens is routed to once (the MoE kernels count
// those, kernels/moe_traffic.h), so B tokens cost less than B times one token's bytes but more
// than one token's; each sequence's own bytes come on top (its linear-attention state, read and
// written back, and at a depth its cached keys and values). None when the model has routed
// experts and the MoE backend did not count them (the reference).
struct StepRoofline {
  double bytes = 0;               // moved per step
  double experts_per_call = 0;    // distinct experts per MoE layer call
  double tokens_per_s = 0;        // B * bandwidth / bytes
  double fraction = 0;            // the test's median over tokens_per_s
  double batch_gain_limit = 0;    // B * bytes per token at batch 1 (with its state and cache) / bytes: the most batching gains while memory-bound
};

// `sequence_bytes`: what each sequence moves of its own per token (every sequence has its own
// state and cache, so a step moves them B times).
std::optional<StepRoofline> step_roofline(const TestResult& t, const CheckpointSummary& s, double gb_per_s,
                                          std::uint64_t sequence_bytes) {
  const bool routed = s.routed_expert_bytes_per_token > 0;
  if (t.steps <= 0 || s.weight_bytes_per_token == 0 || gb_per_s <= 0 || (routed && t.traffic.calls == 0)) return std::nullopt;
  StepRoofline r;
  const double steps = static_cast<double>(t.steps), batch = static_cast<double>(t.batch);
  r.bytes = static_cast<double>(s.weight_bytes_per_token - s.routed_expert_bytes_per_token) +
            static_cast<double>(t.traffic.bytes) / steps + batch * static_cast<double>(sequence_bytes);
  if (t.traffic.calls > 0) r.experts_per_call = static_cast<double>(t.traffic.experts) / static_cast<double>(t.traffic.calls);
  r.tokens_per_s = batch * gb_per_s * 1e9 / r.bytes;
  r.fraction = t.tokens_per_s.median / r.tokens_per_s;
  r.batch_gain_limit = batch * static_cast<double>(s.weight_bytes_per_token + sequence_bytes) / r.bytes;
  return r;
}

nlohmann::json stats_json(const Stats& s) {
  return {{"median", s.median}, {"min", s.min}, {"max", s.max}, {"stddev", s.stddev}, {"samples", s.samples}};
}

std::string fixed(double v, int digits) {
  std::ostringstream os;
  os << std::fixed << std::setprecision(digits) << v;
  return os.str();
}

double gib(std::uint64_t b) { return static_cast<double>(b) / static_cast<double>(1ull << 30); }

void bench(BenchArgs& a) {
  check_args(a);
  const std::vector<std::int64_t> batches = parse_batches(a.batch);
  set_threads(a.threads);

  // Load as run and serve do: map the weights, validate the kernels, build the model, read the
  // tokenizer (time to first token starts here).
  const auto start = Clock::now();
  const CheckpointSummary summary = summarize_checkpoint(a.model_dir);
  engine::RuntimeOptions options;
  options.backends = a.backends;
  options.check_weights = a.check_weights;
  const engine::Runtime rt = engine::open_runtime(a.model_dir, options);
  const double load_s = seconds_since(start);
  print_load_notes(rt, std::cerr, /*kernel_report=*/false);
  const CausalLM* model = rt.model.get();
  const kernels::KernelSelection* selection = rt.kernels.get();
  const std::int64_t vocab = model->vocab_size();
  const std::int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  constexpr std::int64_t kFirstPrompt = 16;

  const std::int64_t max_tokens = std::max({a.prompt, a.generate, kFirstPrompt}) + a.depth + 1;
  const auto kv_needed = static_cast<std::uint64_t>(max_batch * Sequences::bytes_per_sequence(model->state_spec(), max_tokens));
  // Every sequence holds the depth: more than the free memory would end in the OOM killer.
  if (const std::uint64_t avail = available_memory_bytes(); avail > 0 && kv_needed > avail)
    fail("bench: the KV cache for --batch up to ", max_batch, " at -d ", a.depth, " needs ", fixed(gib(kv_needed), 2),
         " GiB, more than the ", fixed(gib(avail), 2), " GiB of memory available (lower -d or the largest --batch)");
  Sequences seqs(model->state_spec(), max_batch, max_tokens);
  std::vector<float> logits(static_cast<std::size_t>(max_batch * vocab));
  prefill(*model, seqs, prompt_tokens(kFirstPrompt, vocab), logits);
  const double ttft_s = seconds_since(start);
  double depth_s = 0.0;
  if (a.depth > 0) {  // the context every test starts from (untimed)
    const auto t0 = Clock::now();
    prefill_in_chunks(*model, seqs, prompt_tokens(a.depth, vocab));
    seqs.state(0).past = a.depth;
    seqs.set_start();
    depth_s = seconds_since(t0);
  }
  const std::string at_depth = a.depth > 0 ? " @ d" + std::to_string(a.depth) : "";

  // The timed part: the tests and the bandwidth probe, whose ratio is the roofline fraction.
  const std::optional<CpuTimes> cpu_before = read_cpu_times();
  const std::optional<double> amx_before = kernels::amx_tile_product_ns();
  std::vector<TestResult> results;
  if (a.prompt > 0) {
    const std::vector<std::int32_t> tokens = prompt_tokens(a.prompt, vocab);
    TestResult t{"pp" + std::to_string(a.prompt) + at_depth, 1, a.prompt, {}, {}, 0, {}};
    std::vector<double> secs, rates;
    // Warm-up, as llama-bench: the first prefill of this length grows the workspaces.
    prefill(*model, seqs, tokens, logits);
    for (int r = 0; r < a.reps; ++r) {
      const auto t0 = Clock::now();
      prefill(*model, seqs, tokens, logits);
      secs.push_back(seconds_since(t0));
      rates.push_back(static_cast<double>(a.prompt) / secs.back());
    }
    t.seconds = stats_of(secs);
    t.tokens_per_s = stats_of(rates);
    results.push_back(t);
  }
  // The roofline's bandwidth, read beside the batch-1 decode (see the top of this file).
  const bool probe_beside = kernels::weight_codes(model->weights().lm_head).size() >= kBesideProbeMinBytes &&
                            std::find(batches.begin(), batches.end(), 1) != batches.end() && a.generate > 0;
  const std::vector<std::span<const std::uint8_t>> beside_regions =
      probe_beside ? decode_read_sample(model->weights(), summary.weight_bytes_per_token)
                   : std::vector<std::span<const std::uint8_t>>{};
  BandwidthResult beside;
  auto read_beside = [&] {
    const BandwidthResult r = measure_regions_bandwidth(beside_regions);
    beside.bytes = r.bytes;
    beside.threads = r.threads;
    beside.load_bits = r.load_bits;
    beside.seconds += r.seconds;
    beside.pass_gb_per_s.insert(beside.pass_gb_per_s.end(), r.pass_gb_per_s.begin(), r.pass_gb_per_s.end());
    beside.best_gb_per_s = std::max(beside.best_gb_per_s, r.best_gb_per_s);
    beside.median_gb_per_s = median_of(beside.pass_gb_per_s);
  };
  if (a.generate > 0) {
    for (std::int64_t b : batches) {
      TestResult t{"tg" + std::to_string(a.generate) + at_depth, b, a.generate * b, {}, {}, 0, {}};
      decode(*model, seqs, b, std::min<std::int64_t>(a.generate, 4), logits);  // warm-up, as llama-bench
      std::vector<double> secs, rates;
      kernels::MoeTraffic before = kernels::moe_traffic();
      for (int r = 0; r < a.reps; ++r) {
        if (b == 1 && probe_beside) read_beside();
        secs.push_back(decode(*model, seqs, b, a.generate, logits));
        rates.push_back(static_cast<double>(a.generate * b) / secs.back());
      }
      t.traffic = kernels::moe_traffic() - before;
      t.steps = a.reps * a.generate;
      if (b == 1 && probe_beside) read_beside();
      t.seconds = stats_of(secs);
      t.tokens_per_s = stats_of(rates);
      results.push_back(t);
    }
  }
  const std::optional<double> amx_after = kernels::amx_tile_product_ns();
  const auto [rss, hwm] = resident_memory();
  const std::uint64_t weights_in_huge_pages = file_bytes_in_huge_pages(a.model_dir);

  BandwidthOptions bw_options;
  bw_options.bytes = a.bandwidth_mib << 20;
  bw_options.min_seconds = a.bandwidth_seconds;
  const BandwidthResult bw = measure_read_bandwidth(bw_options);
  const std::optional<CpuTimes> cpu_after = read_cpu_times();
  const bool steal_known = cpu_before && cpu_after;
  const double steal = steal_known ? steal_fraction(*cpu_before, *cpu_after) : 0.0;
  const double roofline_gb_per_s = probe_beside ? beside.median_gb_per_s : bw.median_gb_per_s;
  const TestResult* tg1 = nullptr;
  for (const TestResult& t : results)
    if (t.name[0] == 't' && t.batch == 1) tg1 = &t;
  // Decode's roofline when a token reads `bytes`, and the batch-1 decode's fraction of it.
  auto roofline_reading = [&](std::uint64_t bytes) {
    return summary.weight_bytes_per_token > 0 ? roofline_gb_per_s * 1e9 / static_cast<double>(bytes) : 0.0;
  };
  auto tg1_fraction_of = [tg1](double roofline) { return tg1 != nullptr && roofline > 0 ? tg1->tokens_per_s.median / roofline : 0.0; };
  // A hybrid model's decode reads each sequence's Gated DeltaNet state (fp32, fixed-size) and
  // writes all of it back, once per token: traffic like the weights', per sequence. For the
  // 16-layer Qwen3.5 shape of docs/perf.md (session 38) it is 100 MB per token, 1.4 % of one
  // token's bytes but 12 % of a 16-sequence step's.
  const auto state_bytes_per_token = static_cast<std::uint64_t>(2 * sizeof(float) * model->state_spec().fixed_state_floats());
  const std::uint64_t token_bytes = summary.weight_bytes_per_token + state_bytes_per_token;
  const double roofline_tps = roofline_reading(token_bytes);
  const double fraction = tg1_fraction_of(roofline_tps);
  // The same against the end-of-run probe's median and best passes: a spell the decode did not
  // run in shows as a gap between these and the roofline's own figure.
  const double fraction_of_probe = bw.median_gb_per_s > 0 ? fraction * roofline_gb_per_s / bw.median_gb_per_s : 0.0;
  const double fraction_of_best = bw.best_gb_per_s > 0 ? fraction * roofline_gb_per_s / bw.best_gb_per_s : 0.0;
  const std::uint64_t expected_memory = summary.resident_weight_bytes + seqs.bytes();
  // What decode reads from the cache per token at the depth, beyond the weights (keys and values).
  const std::uint64_t kv_bytes_at_depth = static_cast<std::uint64_t>(model->state_spec().kv_block_bytes(1) * a.depth);
  // The roofline counting those bytes too (the cache's growth during the test, n << depth, is
  // left out): at 8192 positions of Qwen3-30B-A3B's fp32 cache they are 43 % of what a token reads.
  const double roofline_kv_tps = roofline_reading(token_bytes + kv_bytes_at_depth);
  const std::uint64_t sequence_bytes = state_bytes_per_token + kv_bytes_at_depth;  // per sequence, per token
  const double fraction_kv = tg1_fraction_of(roofline_kv_tps);

  if (a.json) {
    nlohmann::json j;
    j["schema"] = "fp4serve.bench/2";
    j["model"] = {{"dir", a.model_dir},
                  {"model_type", model->config().model_type},
                  {"params_total", summary.params_total},
                  {"params_active", summary.params_active},
                  {"weight_bytes", summary.resident_weight_bytes},
                  {"weight_bytes_per_token", summary.weight_bytes_per_token},
                  {"routed_expert_bytes_per_token", summary.routed_expert_bytes_per_token},
                  {"state_bytes_per_token", state_bytes_per_token}};
    j["threads"] = global_thread_pool().size();
    j["cpu"] = cpu_features().model_name;
    j["semantics"] = selection->report().semantics;
    j["kernels"] = selection->report().to_json();
    j["reps"] = a.reps;
    j["load_s"] = load_s;
    j["ttft_s"] = ttft_s;
    j["ttft_prompt_tokens"] = kFirstPrompt;
    j["depth"] = a.depth;
    j["depth_prefill_s"] = depth_s;
    j["kv_bytes_read_per_token_at_depth"] = kv_bytes_at_depth;
    j["kv_cache_dtype"] = kernels::kv_dtype_name(model->kv_cache_dtype());
    nlohmann::json tests = nlohmann::json::array();
    for (const TestResult& t : results) {
      nlohmann::json e = {{"test", t.name},
                          {"batch", t.batch},
                          {"tokens", t.tokens},
                          {"seconds", stats_json(t.seconds)},
                          {"tokens_per_s", stats_json(t.tokens_per_s)}};
      if (tg1 != nullptr && t.name[0] == 't') e["speedup_vs_batch1"] = t.tokens_per_s.median / tg1->tokens_per_s.median;
      if (const auto sr = step_roofline(t, summary, roofline_gb_per_s, sequence_bytes))
        e["step_roofline"] = {{"bytes_per_step", sr->bytes},
                              {"experts_per_moe_call", sr->experts_per_call},
                              {"tokens_per_s", sr->tokens_per_s},
                              {"fraction", sr->fraction},
                              {"batch_gain_limit", sr->batch_gain_limit}};
      tests.push_back(e);
    }
    j["tests"] = tests;
    j["bandwidth"] = {{"best_gb_per_s", bw.best_gb_per_s},
                      {"median_gb_per_s", bw.median_gb_per_s},
                      {"passes_gb_per_s", bw.pass_gb_per_s},
                      {"seconds", bw.seconds},
                      {"load_bits", bw.load_bits},
                      {"buffer_bytes", bw.bytes},
                      {"llc_bytes", bw.llc_bytes}};
    if (probe_beside)
      j["bandwidth_beside_decode"] = {{"best_gb_per_s", beside.best_gb_per_s},
                                      {"median_gb_per_s", beside.median_gb_per_s},
                                      {"passes_gb_per_s", beside.pass_gb_per_s},
                                      {"seconds", beside.seconds},
                                      {"load_bits", beside.load_bits},
                                      {"region_bytes", beside.bytes},
                                      {"regions", beside_regions.size()}};
    j["roofline"] = {{"bandwidth_gb_per_s", roofline_gb_per_s},
                     {"bandwidth_basis", probe_beside ? "beside batch-1 decode" : "end-of-run probe"},
                     {"bytes_per_token", token_bytes},
                     {"decode_tokens_per_s", roofline_tps},
                     {"tg_batch1_fraction", fraction},
                     {"tg_batch1_fraction_of_probe_median", fraction_of_probe},
                     {"tg_batch1_fraction_of_probe_best", fraction_of_best},
                     {"decode_tokens_per_s_with_kv_at_depth", roofline_kv_tps},
                     {"tg_batch1_fraction_with_kv_at_depth", fraction_kv}};
    j["cpu_steal_fraction"] = steal_known ? nlohmann::json(steal) : nlohmann::json(nullptr);
    j["amx_tile_product_ns"] = amx_before && amx_after
                                   ? nlohmann::json{{"before_tests", *amx_before}, {"after_tests", *amx_after}}
                                   : nlohmann::json(nullptr);
    j["memory"] = {{"vm_rss_bytes", rss},
                   {"vm_hwm_bytes", hwm},
                   {"weight_bytes", summary.resident_weight_bytes},
                   {"kv_bytes", seqs.bytes()},
                   {"weights_2mib_mapped_bytes", weights_in_huge_pages},
                   {"hwm_over_weights_plus_kv", expected_memory > 0 ? static_cast<double>(hwm) / static_cast<double>(expected_memory) : 0.0}};
    std::cout << j.dump() << std::endl;
    return;
  }

  std::cout << "model: " << a.model_dir << " (" << model->config().model_type << ", "
            << fixed(static_cast<double>(summary.params_total) / 1e9, 2) << " B params, "
            << fixed(static_cast<double>(summary.params_active) / 1e9, 2) << " B active; weights "
            << fixed(gib(summary.resident_weight_bytes), 2) << " GiB, decode reads "
            << fixed(static_cast<double>(summary.weight_bytes_per_token) / 1e9, 3) << " GB/token";
  if (state_bytes_per_token > 0)
    std::cout << ", and " << format_bytes(static_cast<double>(state_bytes_per_token))
              << " per token of each sequence's linear-attention state, read and written back";
  std::cout << ")\n";
  std::cout << "threads: " << global_thread_pool().size() << " | reps: " << a.reps << " | semantics: "
            << selection->report().semantics << "\n";
  std::cout << "kernels:";
  for (const auto& f : selection->report().families)
    std::cout << " " << kernels::family_name(f.family) << "=" << (f.chosen.empty() ? "-" : f.chosen);
  std::cout << "\n\n";
  std::cout << "| test          | batch |        t/s | min t/s | max t/s | stddev |\n";
  std::cout << "|---------------|------:|-----------:|--------:|--------:|-------:|\n";
  for (const TestResult& t : results) {
    std::cout << "| " << std::left << std::setw(13) << t.name << std::right << " | " << std::setw(5) << t.batch << " | "
              << std::setw(10) << fixed(t.tokens_per_s.median, 2) << " | " << std::setw(7) << fixed(t.tokens_per_s.min, 2)
              << " | " << std::setw(7) << fixed(t.tokens_per_s.max, 2) << " | " << std::setw(6)
              << fixed(t.tokens_per_s.stddev, 2) << " |\n";
  }
  std::cout << "\nmemory read bandwidth: " << fixed(bw.median_gb_per_s, 2) << " GB/s (median of " << bw.pass_gb_per_s.size()
            << " passes of " << bw.load_bits << "-bit loads over " << (bw.bytes >> 20) << " MiB in " << fixed(bw.seconds, 1)
            << " s, after the tests; best "
            << fixed(bw.best_gb_per_s, 2) << ")\n";
  if (probe_beside)
    std::cout << "beside the batch-1 decode: " << fixed(beside.median_gb_per_s, 2) << " GB/s (median of "
              << beside.pass_gb_per_s.size() << " passes over " << (beside.bytes >> 20)
              << " MiB of the weights a step reads, the lm_head and " << beside_regions.size() - 1
              << " pieces of the rest, before each repetition and after the last; best "
              << fixed(beside.best_gb_per_s, 2) << ")\n";
  if (roofline_tps > 0) {
    std::cout << "decode roofline: " << fixed(roofline_tps, 2) << " tokens/s at the "
              << (probe_beside ? "bandwidth beside the decode" : "bandwidth after the tests");
    if (tg1 != nullptr)
      std::cout << "; tg batch 1 reaches " << fixed(100.0 * fraction, 1) << "% of it ("
                << fixed(100.0 * fraction_of_probe, 1) << "% of the after-tests median's, "
                << fixed(100.0 * fraction_of_best, 1) << "% of its best pass's)";
    std::cout << "\n";
  }
  for (const TestResult& t : results) {
    if (t.name[0] != 't' || t.batch == 1) continue;
    std::cout << "batch " << t.batch << ":";
    if (tg1 != nullptr) std::cout << " " << fixed(t.tokens_per_s.median / tg1->tokens_per_s.median, 2) << "x the aggregate tokens/s of batch 1;";
    if (const auto sr = step_roofline(t, summary, roofline_gb_per_s, sequence_bytes)) {
      std::cout << " a step read " << fixed(sr->bytes / 1e9, 2) << " GB";
      if (summary.routed_expert_bytes_per_token > 0)
        std::cout << " (" << fixed(sr->experts_per_call, 1) << " of " << model->config().num_experts << " experts per MoE layer)";
      std::cout << ", its roofline " << fixed(sr->tokens_per_s, 2) << " tokens/s, reached " << fixed(100.0 * sr->fraction, 1)
                << "%; memory-bound, " << t.batch << " sequences gain at most " << fixed(sr->batch_gain_limit, 2) << "x";
    }
    std::cout << "\n";
  }
  if (a.depth > 0)
    std::cout << "depth: " << a.depth << " tokens prefilled once in " << fixed(depth_s, 1) << " s; decode there also reads "
              << fixed(static_cast<double>(kv_bytes_at_depth) / 1e9, 3)
              << " GB/token of cached keys and values in " << kernels::kv_dtype_name(model->kv_cache_dtype())
              << " (the roofline above leaves them out; with them it is " << fixed(roofline_kv_tps, 2) << " tokens/s"
              << (tg1 != nullptr ? ", and tg batch 1 reaches " + fixed(100.0 * fraction_kv, 1) + "% of it" : std::string())
              << ")\n";
  if (steal_known) {
    std::cout << "cpu time stolen by the hypervisor during the tests: " << fixed(100.0 * steal, 1) << "%";
    if (steal_distorts_figures(steal))
      std::cout << " (other guests shared these CPUs: the t/s and the bandwidth above are lower than this\n"
                   "  machine gives when it is not shared; compare only runs with little steal)";
    std::cout << "\n";
  }
  if (amx_before && amx_after) {
    std::cout << "AMX tile products: " << fixed(*amx_before, 1) << " ns each before the tests, " << fixed(*amx_after, 1)
              << " after";
    if (kernels::amx_unit_varied(*amx_before, *amx_after))
      std::cout << " (the unit's rate moved during the run, as a shared AMX unit's does: figures of the kernels\n"
                   "  on tiles (prefill, batches) moved with it; compare only runs whose two rates agree)";
    std::cout << "\n";
  }
  std::cout << "start to first token: " << fixed(ttft_s, 2) << " s (load + kernel validation " << fixed(load_s, 2)
            << " s, then a " << kFirstPrompt << "-token prompt)\n";
  std::cout << "memory: VmHWM " << fixed(gib(hwm), 2) << " GiB, VmRSS " << fixed(gib(rss), 2) << " GiB; weights "
            << fixed(gib(summary.resident_weight_bytes), 2) << " GiB + KV (" << kernels::kv_dtype_name(model->kv_cache_dtype())
            << (state_bytes_per_token > 0 ? ") and linear-attention state " : ") ") << fixed(gib(seqs.bytes()), 3) << " GiB = "
            << fixed(gib(expected_memory), 2) << " GiB ("
            << fixed(expected_memory > 0 ? 100.0 * static_cast<double>(hwm) / static_cast<double>(expected_memory) : 0.0, 1)
            << "%)\n";
  std::cout << "weights mapped in 2 MiB pages: " << fixed(gib(weights_in_huge_pages), 2) << " GiB";
  if (!transparent_huge_pages_available())
    std::cout << " (transparent huge pages are off in this kernel: /sys/kernel/mm/transparent_hugepage/enabled)";
  else if (weights_in_huge_pages * 2 < summary.resident_weight_bytes)
    std::cout << " (the page cache holds this checkpoint in small pages, and decode then streams it through\n"
                 "  the TLB more slowly; once evicted, e.g. `echo 1 > /proc/sys/vm/drop_caches`, the next load reads it\n"
                 "  into 2 MiB pages)";
  std::cout << "\n";
}

}  // namespace

void register_bench(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench", "Prefill/decode throughput (like llama-bench) against the memory-bandwidth roofline");
  auto a = std::make_shared<BenchArgs>();
  cmd->add_option("-m,--model", a->model_dir, "Checkpoint directory (config.json + safetensors)")->required();
  cmd->add_option("-p,--n-prompt", a->prompt, "Prompt tokens of the prefill test pp<p> (0 = skip)")->capture_default_str();
  cmd->add_option("-n,--n-gen", a->generate, "Tokens generated per sequence in the decode test tg<n> (0 = skip)")
      ->capture_default_str();
  cmd->add_option("-d,--n-depth", a->depth,
                  "Tokens already cached in each sequence before every test (llama-bench's -d; prefilled once, untimed, 512 tokens per forward)")
      ->capture_default_str();
  cmd->add_option("-t,--threads", a->threads, "Kernel threads (default, or 0: FP4SERVE_THREADS or every CPU)");
  cmd->add_option("--batch", a->batch, "Sequences decoding together, comma-separated (e.g. 1,4,16)")->capture_default_str();
  cmd->add_option("--reps", a->reps, "Repetitions of each test")->capture_default_str();
  cmd->add_option("--bandwidth-mib", a->bandwidth_mib,
                  "Buffer of the memory-bandwidth measurement in MiB (default, or 0: 4x the last-level cache, 512..2048)");
  cmd->add_option("--bandwidth-seconds", a->bandwidth_seconds,
                  "Seconds of timed passes of the bandwidth measurement after the tests (at least 3 passes)")
      ->capture_default_str();
  cmd->add_flag("--json", a->json, "Print one JSON object (schema fp4serve.bench/2)");
  cmd->add_flag("--check-weights", a->check_weights, "Scan every weight and scale for NaN/Inf before running");
  kernels::add_backend_options(*cmd, a->backends);
  cmd->callback([a] { bench(*a); });
}

}  // namespace fp4serve::cli
