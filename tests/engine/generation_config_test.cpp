#include "engine/generation_config.h"

#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "common/expect_error.h"
#include "common/temp_dir.h"

namespace fp4serve::engine {
namespace {

using fp4serve::testing::expect_error;
using fp4serve::testing::TempDir;

GenerationConfig read(const TempDir& dir, const std::string& text) {
  std::ofstream(dir.path() / "generation_config.json") << text;
  return read_generation_config(dir.path());
}

TEST(GenerationConfig, MissingFileIsEmpty) {
  TempDir dir;
  const GenerationConfig g = read_generation_config(dir.path());
  EXPECT_TRUE(g.eos_token_ids.empty());
  EXPECT_TRUE(g.sampling.empty());
  EXPECT_EQ(g.sampling.describe(), "none");
}

TEST(GenerationConfig, ReadsQwen3Recommendations) {
  TempDir dir;
  const GenerationConfig g = read(dir, R"({"bos_token_id": 151643, "eos_token_id": [151645, 151643], "do_sample": true,
                                          "temperature": 0.6, "top_p": 0.95, "top_k": 20, "transformers_version": "4.51.0"})");
  EXPECT_EQ(g.eos_token_ids, (std::vector<std::int32_t>{151645, 151643}));
  EXPECT_EQ(g.sampling.temperature, 0.6);
  EXPECT_EQ(g.sampling.top_p, 0.95);
  EXPECT_EQ(g.sampling.top_k, 20);
  EXPECT_FALSE(g.sampling.min_p);
  EXPECT_FALSE(g.sampling.repetition_penalty);
  EXPECT_EQ(g.sampling.describe(), "temperature=0.6 top_p=0.95 top_k=20");
}

TEST(GenerationConfig, SingleEosNullsAndGreedy) {
  TempDir dir;
  GenerationConfig g = read(dir, R"({"eos_token_id": 2, "temperature": null, "top_k": -1, "repetition_penalty": 1.05})");
  EXPECT_EQ(g.eos_token_ids, (std::vector<std::int32_t>{2}));
  EXPECT_FALSE(g.sampling.temperature);
  EXPECT_EQ(g.sampling.top_k, 0);  // -1 = off
  EXPECT_EQ(g.sampling.repetition_penalty, 1.05);
  // do_sample false is greedy, whatever temperature says (transformers' meaning).
  g = read(dir, R"({"do_sample": false, "temperature": 0.7})");
  EXPECT_EQ(g.sampling.temperature, 0.0);
}

TEST(GenerationConfig, BadFieldsNameTheFileAndField) {
  TempDir dir;
  const std::string file = "generation_config.json";
  expect_error([&] { read(dir, "{"); }, {file, "not valid JSON"});
  expect_error([&] { read(dir, "[1]"); }, {file, "JSON object"});
  expect_error([&] { read(dir, R"({"temperature": "hot"})"); }, {file, "temperature", "number"});
  expect_error([&] { read(dir, R"({"temperature": -1})"); }, {file, "temperature", "outside"});
  expect_error([&] { read(dir, R"({"top_p": 1.5})"); }, {file, "top_p"});
  expect_error([&] { read(dir, R"({"top_p": 0})"); }, {file, "top_p"});
  expect_error([&] { read(dir, R"({"top_k": 2.5})"); }, {file, "top_k"});
  expect_error([&] { read(dir, R"({"min_p": 2})"); }, {file, "min_p"});
  expect_error([&] { read(dir, R"({"repetition_penalty": 0})"); }, {file, "repetition_penalty"});
  expect_error([&] { read(dir, R"({"eos_token_id": "x"})"); }, {file, "eos_token_id"});
  expect_error([&] { read(dir, R"({"eos_token_id": [1, -4]})"); }, {file, "eos_token_id"});
}

}  // namespace
}  // namespace fp4serve::engine
