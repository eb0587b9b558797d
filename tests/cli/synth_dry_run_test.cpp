// `fp4serve synth --dry-run` against `fp4serve inspect`, through the real binary.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "common/cli_runner.h"
#include "common/temp_dir.h"

namespace {

namespace fs = std::filesystem;

using fp4serve::testing::CliResult;

// Stdout only: the summary, without progress or errors.
CliResult run(const std::string& args) {
  return fp4serve::testing::run_cli(args, fp4serve::testing::CliStderr::kDrop);
}

TEST(CliSynthDryRun, PrintsExactlyWhatInspectPrintsForTheWrittenCheckpoint) {
  fp4serve::testing::TempDir tmp;
  for (const std::string arch : {"qwen3_5_moe", "qwen3_next"}) {
    const std::string out = (tmp / arch).string();
    const std::string shape = "--arch " + arch + " --preset tiny --seed 5 --out " + out;
    const CliResult dry = run("synth " + shape + " --dry-run");
    ASSERT_EQ(dry.code, 0) << dry.out;
    EXPECT_FALSE(fs::exists(out));
    const CliResult dry_json = run("synth " + shape + " --dry-run --json");
    ASSERT_EQ(dry_json.code, 0) << dry_json.out;

    ASSERT_EQ(run("synth " + shape + " --no-data --quiet").code, 0);
    const CliResult inspect = run("inspect " + out);
    ASSERT_EQ(inspect.code, 0) << inspect.out;
    EXPECT_EQ(dry.out, inspect.out);
    EXPECT_NE(inspect.out.find("3 linear_attention + 1 full_attention"), std::string::npos) << inspect.out;
    const CliResult inspect_json = run("inspect --json " + out);
    EXPECT_EQ(nlohmann::json::parse(dry_json.out), nlohmann::json::parse(inspect_json.out));
  }
}

TEST(CliSynthDryRun, NeedsNoOutputDirectoryAndRejectsMisuse) {
  const CliResult dry = run("synth --arch qwen3_next --preset 80b-a3b --dry-run --json");
  ASSERT_EQ(dry.code, 0) << dry.out;
  const auto j = nlohmann::json::parse(dry.out);
  EXPECT_EQ(j["architecture"]["layer_pattern"], "36 linear_attention + 12 full_attention");
  EXPECT_GT(j["parameters"]["total"].get<std::int64_t>(), 79'000'000'000);
  EXPECT_NE(run("synth --arch qwen3_next --preset tiny").code, 0);          // neither --out nor --dry-run
  EXPECT_NE(run("synth --arch qwen3_next --preset tiny --json").code, 0);   // --json without --dry-run
  EXPECT_NE(run("synth --arch qwen3_next --preset 397b-a17b --dry-run").code, 0);  // another arch's preset
}

}  // namespace
