// `fp4serve bench`: argument errors name the flag; --json carries every documented field with
// values that hang together (run on a tiny synth model, so the figures themselves mean little).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/bandwidth_stopping_rule.h"
#include "common/cli_runner.h"
#include "common/temp_dir.h"
#include "kernels/tile_rate.h"
#include "util/memory_bandwidth.h"
#include "util/word_sum.h"

namespace {

using fp4serve::testing::CliResult;
using fp4serve::testing::run_cli;

// `bench --json`'s object: its last line that opens one (the load notes come before it in the
// merged output).
nlohmann::json bench_json(const CliResult& r) { return nlohmann::json::parse(r.out.substr(r.out.rfind("\n{") + 1)); }

void expect_refused(const std::string& args, const std::string& needle) {
  const CliResult r = run_cli("bench " + args);
  EXPECT_NE(r.code, 0) << args << "\n" << r.out;
  EXPECT_NE(r.out.find(needle), std::string::npos) << args << "\n" << r.out;
}

TEST(Bench, ArgumentErrorsNameTheFlag) {
  fp4serve::testing::TempDir tmp;
  const std::string m = "-m " + (tmp.path() / "none").string();
  expect_refused(m + " --batch 0", "--batch: 0 is out of range");
  expect_refused(m + " --batch 1,x", "--batch: 'x' is not a number");
  expect_refused(m + " --batch 4,4", "--batch: 4 is listed twice");
  expect_refused(m + " --batch ,", "--batch");
  expect_refused(m + " --reps 0", "--reps must be 1..1000");
  expect_refused(m + " -p 0 -n 0", "nothing to measure");
  expect_refused(m + " -p 70000", "-p/--n-prompt must be 0..65536");
  expect_refused(m + " -t 5000", "-t/--threads");
  expect_refused(m + " -t -1", "-t/--threads must be 1..1024 (or 0: the default)");
  expect_refused(m + " -d -1", "-d/--n-depth must be 0..65536");
  expect_refused(m + " --bandwidth-seconds 61", "--bandwidth-seconds must be 0..60");
  expect_refused(m + " --bandwidth-seconds -1", "--bandwidth-seconds must be 0..60");
  expect_refused("-p 8", "--model");                  // -m is required
  expect_refused(m + " -p 8 -n 2", tmp.path().string());  // a missing checkpoint is named
}

// --help says 0 means the default buffer (4x the last-level cache, 512 MiB..2 GiB), as -t 0 does.
TEST(Bench, BandwidthMibZeroIsTheDefaultBuffer) {
  fp4serve::testing::TempDir tmp;
  const std::string dir = (tmp.path() / "tiny").string();
  ASSERT_EQ(run_cli("synth --preset tiny --seed 5 --quiet --out " + dir).code, 0);
  const CliResult r = run_cli("bench -m " + dir + " -p 0 -n 1 --reps 1 -t 2 --bandwidth-mib 0 --bandwidth-seconds 0 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = bench_json(r);
  const auto llc = j["bandwidth"]["llc_bytes"].get<std::uint64_t>();
  EXPECT_EQ(j["bandwidth"]["buffer_bytes"].get<std::uint64_t>(), fp4serve::default_bandwidth_buffer_bytes(llc));
}

TEST(Bench, JsonHasEveryFieldOnATinyModel) {
  fp4serve::testing::TempDir tmp;
  const std::string dir = (tmp.path() / "tiny").string();
  const CliResult synth = run_cli("synth --preset tiny --seed 5 --quiet --out " + dir);
  ASSERT_EQ(synth.code, 0) << synth.out;

  const CliResult r = run_cli("bench -m " + dir + " -p 8 -n 3 --batch 1,2 --reps 2 -t 2 --bandwidth-mib 16 --bandwidth-seconds 0.2 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = bench_json(r);
  EXPECT_EQ(j["schema"], "fp4serve.bench/2");
  EXPECT_EQ(j["threads"], 2);
  EXPECT_EQ(j["reps"], 2);
  EXPECT_EQ(j["model"]["model_type"], "qwen3_moe");
  EXPECT_GT(j["model"]["weight_bytes_per_token"].get<double>(), 0);
  EXPECT_EQ(j["model"]["state_bytes_per_token"], 0);  // no linear-attention layers
  EXPECT_EQ(j["roofline"]["bytes_per_token"], j["model"]["weight_bytes_per_token"]);

  const auto& tests = j["tests"];
  ASSERT_EQ(tests.size(), 3u) << tests.dump();
  EXPECT_EQ(tests[0]["test"], "pp8");
  EXPECT_EQ(tests[0]["tokens"], 8);
  EXPECT_EQ(tests[1]["test"], "tg3");
  EXPECT_EQ(tests[1]["batch"], 1);
  EXPECT_EQ(tests[1]["tokens"], 3);
  EXPECT_EQ(tests[2]["batch"], 2);
  EXPECT_EQ(tests[2]["tokens"], 6);
  for (const auto& t : tests) {
    const auto& tps = t["tokens_per_s"];
    ASSERT_EQ(tps["samples"].size(), 2u);
    EXPECT_GT(tps["min"].get<double>(), 0);
    EXPECT_LE(tps["min"].get<double>(), tps["median"].get<double>());
    EXPECT_LE(tps["median"].get<double>(), tps["max"].get<double>());
    // tokens/s and seconds describe the same repetitions.
    const double s0 = t["seconds"]["samples"][0].get<double>();
    EXPECT_NEAR(tps["samples"][0].get<double>() * s0, t["tokens"].get<double>(), 1e-6 * t["tokens"].get<double>());
  }
  EXPECT_NEAR(tests[1]["speedup_vs_batch1"].get<double>(), 1.0, 1e-12);
  EXPECT_GT(tests[2]["speedup_vs_batch1"].get<double>(), 0);

  EXPECT_GT(j["bandwidth"]["best_gb_per_s"].get<double>(), 0);
  EXPECT_EQ(j["bandwidth"]["buffer_bytes"], 16u << 20);
  EXPECT_EQ(j["bandwidth"]["load_bits"], fp4serve::widest_word_sum_bits());  // the widest loads this CPU runs
  // --bandwidth-seconds 0.2: three passes over 16 MiB (the default count), then more until 0.2 s is spent
  // or the cap is reached.
  const auto probe_passes = j["bandwidth"]["passes_gb_per_s"].get<std::vector<double>>();
  fp4serve::testing::expect_bandwidth_stopping_rule(probe_passes, 16u << 20, 3, 0.2, fp4serve::kMaxBandwidthPasses);
  if (probe_passes.size() < static_cast<std::size_t>(fp4serve::kMaxBandwidthPasses)) {
    EXPECT_GE(j["bandwidth"]["seconds"].get<double>(), 0.2);
  }
  const double median_bw = j["bandwidth"]["median_gb_per_s"].get<double>();
  EXPECT_GT(median_bw, 0);
  EXPECT_LE(median_bw, j["bandwidth"]["best_gb_per_s"].get<double>());
  // The roofline is the median pass of the probe after the tests.
  EXPECT_EQ(j["roofline"]["bandwidth_gb_per_s"].get<double>(), median_bw);
  EXPECT_EQ(j["roofline"]["bandwidth_basis"], "end-of-run probe");  // the tiny model's lm_head is under 64 MiB
  EXPECT_FALSE(j.contains("bandwidth_beside_decode"));
  const double roofline = j["roofline"]["decode_tokens_per_s"].get<double>();
  EXPECT_NEAR(roofline, median_bw * 1e9 / j["model"]["weight_bytes_per_token"].get<double>(), 1e-9 * roofline);
  EXPECT_NEAR(j["roofline"]["tg_batch1_fraction"].get<double>(), tests[1]["tokens_per_s"]["median"].get<double>() / roofline,
              1e-9);
  EXPECT_NEAR(j["roofline"]["tg_batch1_fraction_of_probe_median"].get<double>(), j["roofline"]["tg_batch1_fraction"].get<double>(),
              1e-12);
  EXPECT_NEAR(j["roofline"]["tg_batch1_fraction_of_probe_best"].get<double>(),
              tests[1]["tokens_per_s"]["median"].get<double>() * j["model"]["weight_bytes_per_token"].get<double>() /
                  (j["bandwidth"]["best_gb_per_s"].get<double>() * 1e9),
              1e-9);

  const auto& mem = j["memory"];
  EXPECT_GT(mem["vm_rss_bytes"].get<double>(), 0);
  EXPECT_GE(mem["vm_hwm_bytes"].get<double>(), mem["vm_rss_bytes"].get<double>());
  EXPECT_GT(mem["kv_bytes"].get<double>(), 0);
  EXPECT_EQ(mem["weight_bytes"], j["model"]["weight_bytes"]);
  // Only the weight files are mapped from disk in 2 MiB pages; at most one page of headers beyond them.
  EXPECT_LE(mem["weights_2mib_mapped_bytes"].get<double>(), mem["weight_bytes"].get<double>() + (2 << 20));
  EXPECT_GT(j["load_s"].get<double>(), 0);
  EXPECT_GT(j["ttft_s"].get<double>(), j["load_s"].get<double>());
  EXPECT_EQ(j["ttft_prompt_tokens"], 16);
  EXPECT_TRUE(j["kernels"].is_object());
  // This machine is Linux: the stolen share is read, and is a share.
  ASSERT_TRUE(j["cpu_steal_fraction"].is_number());
  EXPECT_GE(j["cpu_steal_fraction"].get<double>(), 0.0);
  EXPECT_LE(j["cpu_steal_fraction"].get<double>(), 1.0);
  // The AMX unit's rate before and after the tests where it runs, nothing where it does not.
  if (fp4serve::kernels::amx_tiles_usable()) {
    for (const char* when : {"before_tests", "after_tests"}) {
      ASSERT_TRUE(j["amx_tile_product_ns"][when].is_number()) << when;
      // A product is 16 x 16 x 32 multiply-adds: from ~16 cycles at any clock a CPU runs.
      EXPECT_GT(j["amx_tile_product_ns"][when].get<double>(), 1.0) << when;
      EXPECT_LT(j["amx_tile_product_ns"][when].get<double>(), 1000.0) << when;
    }
  } else {
    EXPECT_TRUE(j["amx_tile_product_ns"].is_null());
  }
}

// A batched decode step reads the weights outside the routed experts once and each expert its
// tokens are routed to once; the MoE kernels count those experts, and each decode test gets a
// roofline of its own from them.
TEST(Bench, EachDecodeTestHasAStepRooflineFromTheExpertsItUsed) {
  fp4serve::testing::TempDir tmp;
  const std::string dir = (tmp.path() / "tiny").string();
  ASSERT_EQ(run_cli("synth --preset tiny --seed 5 --quiet --out " + dir).code, 0);
  const auto config = nlohmann::json::parse(std::ifstream(tmp.path() / "tiny" / "config.json"));
  const double top_k = config["num_experts_per_tok"].get<double>(), experts = config["num_experts"].get<double>();

  const CliResult r = run_cli("bench -m " + dir + " -p 0 -n 3 --batch 1,4 --reps 2 -t 2 --bandwidth-mib 16 --bandwidth-seconds 0 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = bench_json(r);
  const double per_token = j["model"]["weight_bytes_per_token"].get<double>();
  const double routed = j["model"]["routed_expert_bytes_per_token"].get<double>();
  EXPECT_GT(routed, 0);
  EXPECT_LT(routed, per_token);
  const double bw = j["roofline"]["bandwidth_gb_per_s"].get<double>();
  const auto& tests = j["tests"];
  ASSERT_EQ(tests.size(), 2u);

  // One token uses exactly top_k experts per layer: its step reads what the summary says a token
  // reads (up to the per-tensor scalars the kernels do not count).
  const auto& one = tests[0]["step_roofline"];
  EXPECT_EQ(one["experts_per_moe_call"].get<double>(), top_k);
  EXPECT_NEAR(one["bytes_per_step"].get<double>(), per_token, 1e-3 * per_token);
  EXPECT_NEAR(one["batch_gain_limit"].get<double>(), 1.0, 1e-3);
  EXPECT_NEAR(one["tokens_per_s"].get<double>(), j["roofline"]["decode_tokens_per_s"].get<double>(),
              1e-3 * one["tokens_per_s"].get<double>());

  // Four tokens use between top_k and 4 top_k distinct experts per layer, each of one expert's
  // bytes (all experts have one shape), on top of the shared weights read once.
  const auto& four = tests[1]["step_roofline"];
  const double used = four["experts_per_moe_call"].get<double>();
  EXPECT_GE(used, top_k);
  EXPECT_LE(used, std::min(experts, 4 * top_k));
  const double bytes = four["bytes_per_step"].get<double>();
  EXPECT_NEAR(bytes, per_token - routed + used * routed / top_k, 1e-3 * bytes);
  EXPECT_NEAR(four["tokens_per_s"].get<double>(), 4 * bw * 1e9 / bytes, 1e-9 * four["tokens_per_s"].get<double>());
  EXPECT_NEAR(four["fraction"].get<double>(), tests[1]["tokens_per_s"]["median"].get<double>() / four["tokens_per_s"].get<double>(),
              1e-9);
  EXPECT_NEAR(four["batch_gain_limit"].get<double>(), 4 * per_token / bytes, 1e-9);

  // The text report says the same for the batched test.
  const CliResult text = run_cli("bench -m " + dir + " -p 0 -n 2 --batch 1,4 --reps 1 -t 2 --bandwidth-mib 16 --bandwidth-seconds 0");
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("batch 4: "), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("experts per MoE layer), its roofline"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("4 sequences gain at most"), std::string::npos) << text.out;
}

// A hybrid model's decode reads each sequence's Gated DeltaNet state and writes it back every
// token: the roofline counts that traffic on top of the weights, once per sequence in a step.
TEST(Bench, AHybridModelsRooflineCountsEachSequencesLinearAttentionState) {
  fp4serve::testing::TempDir tmp;
  const std::string dir = (tmp.path() / "hybrid").string();
  ASSERT_EQ(run_cli("synth --arch qwen3_5_moe --preset tiny --seed 5 --quiet --out " + dir).code, 0);
  const CliResult inspect = run_cli("inspect " + dir + " --json");
  ASSERT_EQ(inspect.code, 0) << inspect.out;
  const auto summary = nlohmann::json::parse(inspect.out.substr(inspect.out.find('{')));
  const double state = summary["memory"]["linear_attention_state_bytes_per_sequence"].get<double>();
  ASSERT_GT(state, 0);
  const auto config = nlohmann::json::parse(std::ifstream(tmp.path() / "hybrid" / "config.json"))["text_config"];
  const double top_k = config["num_experts_per_tok"].get<double>();

  const CliResult r = run_cli("bench -m " + dir + " -p 0 -n 3 --batch 1,4 --reps 1 -t 2 --bandwidth-mib 16 --bandwidth-seconds 0 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = bench_json(r);
  // The state inspect reports, read and written: the model's runtime state has the same size.
  EXPECT_EQ(j["model"]["state_bytes_per_token"].get<double>(), 2 * state);
  const double weights = j["model"]["weight_bytes_per_token"].get<double>();
  const double routed = j["model"]["routed_expert_bytes_per_token"].get<double>();
  EXPECT_EQ(j["roofline"]["bytes_per_token"].get<double>(), weights + 2 * state);
  const double bw = j["roofline"]["bandwidth_gb_per_s"].get<double>();
  EXPECT_NEAR(j["roofline"]["decode_tokens_per_s"].get<double>(), bw * 1e9 / (weights + 2 * state),
              1e-9 * j["roofline"]["decode_tokens_per_s"].get<double>());
  // Four sequences share the weights outside the experts they use, and each moves its own state.
  const auto& four = j["tests"][1]["step_roofline"];
  const double bytes = four["bytes_per_step"].get<double>();
  const double used = four["experts_per_moe_call"].get<double>();
  EXPECT_NEAR(bytes, weights - routed + used * routed / top_k + 4 * 2 * state, 1e-3 * bytes);
  EXPECT_NEAR(four["batch_gain_limit"].get<double>(), 4 * (weights + 2 * state) / bytes, 1e-9);

  const CliResult text = run_cli("bench -m " + dir + " -p 0 -n 2 --reps 1 -t 2 --bandwidth-mib 16 --bandwidth-seconds 0");
  ASSERT_EQ(text.code, 0) << text.out;
  EXPECT_NE(text.out.find("per token of each sequence's linear-attention state, read and written back"), std::string::npos)
      << text.out;
  // The sequences' memory holds that state beside the cache.
  EXPECT_NE(text.out.find(") and linear-attention state "), std::string::npos) << text.out;
}

TEST(Bench, RooflineBandwidthIsReadBesideTheBatchOneDecode) {
  fp4serve::testing::TempDir tmp;
  const std::string dir = (tmp.path() / "small").string();
  ASSERT_EQ(run_cli("synth --preset small --seed 7 --quiet --out " + dir).code, 0);  // a 311 MB lm_head
  const CliResult r =
      run_cli("bench -m " + dir + " -p 0 -n 2 --batch 1,2 --reps 2 -t 2 --bandwidth-mib 16 --bandwidth-seconds 0 --json");
  ASSERT_EQ(r.code, 0) << r.out;
  const auto j = bench_json(r);
  const auto& beside = j["bandwidth_beside_decode"];
  ASSERT_TRUE(beside.is_object()) << j.dump();
  // Three passes before each of the two repetitions and after the last.
  EXPECT_EQ(beside["passes_gb_per_s"].size(), 9u);
  EXPECT_EQ(beside["load_bits"], fp4serve::widest_word_sum_bits());
  EXPECT_GE(beside["region_bytes"].get<double>(), 64.0 * (1 << 20));
  EXPECT_LT(beside["region_bytes"].get<double>(), j["model"]["weight_bytes"].get<double>());
  // It samples as many bytes as a decode step reads (each region read from its first whole word).
  EXPECT_NEAR(beside["region_bytes"].get<double>(), j["model"]["weight_bytes_per_token"].get<double>(),
              8.0 * beside["regions"].get<double>());
  EXPECT_LE(beside["median_gb_per_s"].get<double>(), beside["best_gb_per_s"].get<double>());
  EXPECT_EQ(j["roofline"]["bandwidth_basis"], "beside batch-1 decode");
  EXPECT_EQ(j["roofline"]["bandwidth_gb_per_s"].get<double>(), beside["median_gb_per_s"].get<double>());
  const double tg1 = j["tests"][0]["tokens_per_s"]["median"].get<double>();
  EXPECT_NEAR(j["roofline"]["tg_batch1_fraction"].get<double>(),
              tg1 * j["model"]["weight_bytes_per_token"].get<double>() / (beside["median_gb_per_s"].get<double>() * 1e9),
              1e-9);
  EXPECT_EQ(j["bandwidth"]["passes_gb_per_s"].size(), 3u);  // the end-of-run probe still runs

  // Without a batch-1 decode test there is nothing to read beside: the end-of-run probe is the roofline.
  const CliResult r2 =
      run_cli("bench -m " + dir + " -p 0 -n 2 --batch 2 --reps 1 -t 2 --bandwidth-mib 16 --bandwidth-seconds 0 --json");
  ASSERT_EQ(r2.code, 0) << r2.out;
  const auto j2 = bench_json(r2);
  EXPECT_FALSE(j2.contains("bandwidth_beside_decode"));
  EXPECT_EQ(j2["roofline"]["bandwidth_basis"], "end-of-run probe");
}

TEST(Bench, DepthStartsEveryTestFromAPrefilledContext) {
  fp4serve::testing::TempDir tmp;
  const std::string dir = (tmp.path() / "tiny").string();
  ASSERT_EQ(run_cli("synth --preset tiny --seed 7 --quiet --out " + dir).code, 0);
  auto run = [&](const std::string& depth) {
    const CliResult r = run_cli("bench -m " + dir + " -p 4 -n 3 --batch 1,2 --reps 2 --bandwidth-mib 16 --bandwidth-seconds 0 --json" + depth);
    EXPECT_EQ(r.code, 0) << r.out;
    return bench_json(r);
  };
  const auto flat = run("");
  const auto deep = run(" -d 40");
  EXPECT_EQ(flat["depth"], 0);
  EXPECT_EQ(flat["kv_bytes_read_per_token_at_depth"], 0);
  EXPECT_EQ(deep["depth"], 40);
  EXPECT_GT(deep["depth_prefill_s"].get<double>(), 0);
  ASSERT_EQ(deep["tests"].size(), 3u);
  EXPECT_EQ(deep["tests"][0]["test"], "pp4 @ d40");
  EXPECT_EQ(deep["tests"][1]["test"], "tg3 @ d40");
  EXPECT_EQ(deep["tests"][2]["batch"], 2);
  // Every cached position is read once per decoded token: 40 positions' keys and values.
  const double kv_per_token = deep["kv_bytes_read_per_token_at_depth"].get<double>() / 40.0;
  EXPECT_GT(kv_per_token, 0);
  // That is the cache's size per position: without depth 2 sequences hold 2 blocks of 16 (the
  // 16-token first prompt + 1); with it the depth is added to each (57 positions: 4 blocks).
  EXPECT_DOUBLE_EQ(flat["memory"]["kv_bytes"].get<double>(), 2 * 32 * kv_per_token);
  EXPECT_DOUBLE_EQ(deep["memory"]["kv_bytes"].get<double>(), 2 * 64 * kv_per_token);
  // The roofline counting the cache: the same bandwidth over weights + cached bytes per token.
  EXPECT_DOUBLE_EQ(flat["roofline"]["decode_tokens_per_s_with_kv_at_depth"].get<double>(),
                   flat["roofline"]["decode_tokens_per_s"].get<double>());
  const double weights = deep["model"]["weight_bytes_per_token"].get<double>();
  const double with_kv = deep["roofline"]["bandwidth_gb_per_s"].get<double>() * 1e9 /
                         (weights + deep["kv_bytes_read_per_token_at_depth"].get<double>());
  EXPECT_NEAR(deep["roofline"]["decode_tokens_per_s_with_kv_at_depth"].get<double>(), with_kv, 1e-9 * with_kv);
  EXPECT_LT(with_kv, deep["roofline"]["decode_tokens_per_s"].get<double>());
  EXPECT_NEAR(deep["roofline"]["tg_batch1_fraction_with_kv_at_depth"].get<double>(),
              deep["tests"][1]["tokens_per_s"]["median"].get<double>() / with_kv, 1e-9);
  // A batched step at depth reads each sequence's cache on top of the weights it shares, so
  // batching gains at most B * (weights + cache) / what the step read.
  const auto& step = deep["tests"][2]["step_roofline"];
  const double kv_at_depth = deep["kv_bytes_read_per_token_at_depth"].get<double>();
  EXPECT_GT(step["bytes_per_step"].get<double>(), 2 * kv_at_depth);
  EXPECT_NEAR(step["batch_gain_limit"].get<double>(), 2 * (weights + kv_at_depth) / step["bytes_per_step"].get<double>(), 1e-9);
  // A depth past one 512-token forward is prefilled in several (as llama-bench's micro-batches).
  const auto deeper = run(" -d 1100");
  EXPECT_EQ(deeper["tests"][1]["test"], "tg3 @ d1100");
  EXPECT_DOUBLE_EQ(deeper["kv_bytes_read_per_token_at_depth"].get<double>(), 1100 * kv_per_token);

  // A hybrid model's start also holds the linear-attention state, restored before every test
  // (bench fails on non-finite logits, so a state left half-written would show).
  const std::string hybrid = (tmp.path() / "hybrid").string();
  ASSERT_EQ(run_cli("synth --arch qwen3_5_moe --preset tiny --seed 7 --quiet --out " + hybrid).code, 0);
  const CliResult h = run_cli("bench -m " + hybrid + " -p 4 -n 3 -d 24 --batch 1,2 --reps 2 --bandwidth-mib 16 --bandwidth-seconds 0");
  ASSERT_EQ(h.code, 0) << h.out;
  for (const char* want : {"| pp4 @ d24 ", "| tg3 @ d24 ", "depth: 24 tokens prefilled once", "; with them it is ",
                           "and tg batch 1 reaches "})
    EXPECT_NE(h.out.find(want), std::string::npos) << want << "\n" << h.out;
}

TEST(Bench, SixteenBitKvCacheHalvesTheCacheBytes) {
  fp4serve::testing::TempDir tmp;
  const std::string dir = (tmp.path() / "tiny").string();
  ASSERT_EQ(run_cli("synth --preset tiny --seed 7 --quiet --out " + dir).code, 0);
  auto run = [&](const std::string& flag) {
    const CliResult r = run_cli("bench -m " + dir + " -p 4 -n 3 -d 40 --reps 1 --bandwidth-mib 16 --bandwidth-seconds 0 --json" + flag);
    EXPECT_EQ(r.code, 0) << r.out;
    return bench_json(r);
  };
  const auto f32 = run(""), f16 = run(" --kv-cache-dtype f16"), bf16 = run(" --kv-cache-dtype bfloat16");
  EXPECT_EQ(f32["kv_cache_dtype"], "f32");
  EXPECT_EQ(f16["kv_cache_dtype"], "f16");
  EXPECT_EQ(bf16["kv_cache_dtype"], "bf16");
  EXPECT_EQ(2 * f16["kv_bytes_read_per_token_at_depth"].get<double>(), f32["kv_bytes_read_per_token_at_depth"].get<double>());
  EXPECT_EQ(2 * f16["memory"]["kv_bytes"].get<double>(), f32["memory"]["kv_bytes"].get<double>());
  EXPECT_EQ(bf16["memory"]["kv_bytes"], f16["memory"]["kv_bytes"]);
  // The attention backend was validated on the cache type the run uses.
  const std::string report = f16["kernels"].dump();
  EXPECT_NE(report.find("f16 KV cache"), std::string::npos) << report;
  expect_refused("-m " + dir + " --kv-cache-dtype f8", "--kv-cache-dtype");
}

TEST(Bench, ACacheLargerThanTheFreeMemoryIsRefused) {
  // 8 layers of 64 KV heads of 256: 1 MiB of keys and values per position; 256 sequences of
  // 65537 positions would need 16 TiB. bench must say so instead of meeting the OOM killer.
  fp4serve::testing::TempDir tmp;
  const std::string dir = (tmp.path() / "wide").string();
  ASSERT_EQ(run_cli("synth --preset tiny --heads 64 --kv-heads 64 --head-dim 256 --layers 8 --seed 2 --quiet --out " + dir).code, 0);
  const CliResult r = run_cli("bench -m " + dir + " -p 0 -n 1 -d 65536 --batch 256 --bandwidth-mib 16 --bandwidth-seconds 0");
  EXPECT_NE(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("the KV cache for --batch up to 256 at -d 65536 needs 16392.00 GiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("lower -d or the largest --batch"), std::string::npos) << r.out;
}

TEST(Bench, TextOutputShowsTheRooflineAndLoadNotes) {
  fp4serve::testing::TempDir tmp;
  const std::string dir = (tmp.path() / "tiny").string();
  ASSERT_EQ(run_cli("synth --preset tiny --seed 6 --quiet --out " + dir).code, 0);
  const CliResult r = run_cli("bench -m " + dir + " -p 4 -n 2 --reps 1 --bandwidth-mib 16 --bandwidth-seconds 0 --check-weights");
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* s : {"| pp4 ", "| tg2 ", "memory read bandwidth:", "GB/s (median of ", "-bit loads over ", "; best ",
                        "decode roofline:", "at the bandwidth after the tests",
                        "of the after-tests median's", "of its best pass's", "start to first token:", "VmHWM", "check-weights: ",
                        "weights mapped in 2 MiB pages: "})
    EXPECT_NE(r.out.find(s), std::string::npos) << s << "\n" << r.out;
  // The AMX unit's rate beside the tests, only where AMX runs.
  EXPECT_EQ(r.out.find("AMX tile products: ") != std::string::npos, fp4serve::kernels::amx_tiles_usable()) << r.out;
}

}  // namespace
