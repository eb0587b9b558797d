// `fp4serve synth --dry-run` against `fp4serve inspect`, through the real binary.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

#include "common/temp_dir.h"

namespace {

namespace fs = std::filesystem;

struct Result {
  int code = -1;
  std::string out;  // stdout only: the summary, without progress or errors
};

Result run(const std::string& args) {
  const std::string cmd = std::string(FP4SERVE_BINARY) + " " + args + " 2>/dev/null";
  Result r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

TEST(CliSynthDryRun, PrintsExactlyWhatInspectPrintsForTheWrittenCheckpoint) {
  fp4serve::testing::TempDir tmp;
  for (const std::string arch : {"qwen3_5_moe", "qwen3_next"}) {
    const std::string out = (tmp / arch).string();
    const std::string shape = "--arch " + arch + " --preset tiny --seed 5 --out " + out;
    const Result dry = run("synth " + shape + " --dry-run");
    ASSERT_EQ(dry.code, 0) << dry.out;
    EXPECT_FALSE(fs::exists(out));
    const Result dry_json = run("synth " + shape + " --dry-run --json");
    ASSERT_EQ(dry_json.code, 0) << dry_json.out;

    ASSERT_EQ(run("synth " + shape + " --no-data --quiet").code, 0);
    const Result inspect = run("inspect " + out);
    ASSERT_EQ(inspect.code, 0) << inspect.out;
    EXPECT_EQ(dry.out, inspect.out);
    EXPECT_NE(inspect.out.find("3 linear_attention + 1 full_attention"), std::string::npos) << inspect.out;
    const Result inspect_json = run("inspect --json " + out);
    EXPECT_EQ(nlohmann::json::parse(dry_json.out), nlohmann::json::parse(inspect_json.out));
  }
}

TEST(CliSynthDryRun, NeedsNoOutputDirectoryAndRejectsMisuse) {
  const Result dry = run("synth --arch qwen3_next --preset 80b-a3b --dry-run --json");
  ASSERT_EQ(dry.code, 0) << dry.out;
  const auto j = nlohmann::json::parse(dry.out);
  EXPECT_EQ(j["architecture"]["layer_pattern"], "36 linear_attention + 12 full_attention");
  EXPECT_GT(j["parameters"]["total"].get<std::int64_t>(), 79'000'000'000);
  EXPECT_NE(run("synth --arch qwen3_next --preset tiny").code, 0);          // neither --out nor --dry-run
  EXPECT_NE(run("synth --arch qwen3_next --preset tiny --json").code, 0);   // --json without --dry-run
  EXPECT_NE(run("synth --arch qwen3_next --preset 397b-a17b --dry-run").code, 0);  // another arch's preset
}

}  // namespace
