// Checkpoint directories: single-file and sharded layouts, and each way they can be inconsistent.
// Every error must name the file (or folder) and the tensor at fault.
#include "formats/checkpoint.h"

#include <gtest/gtest.h>

#include <string>

#include "formats/st_builder.h"

namespace fp4serve {
namespace {

using st_test::error_of;
using st_test::RawTensor;
using st_test::st_file;
using st_test::TempDir;
using st_test::write_bytes;
using st_test::write_st;

std::string open_error(const std::filesystem::path& dir) {
  return error_of([&] { Checkpoint::open(dir); });
}

std::string as_string(std::span<const std::uint8_t> bytes) {
  return {reinterpret_cast<const char*>(bytes.data()), bytes.size()};
}

// ---------------------------------------------------------------------------------------------
// Single file

TEST(CheckpointSingle, OpensModelSafetensors) {
  TempDir dir;
  st_file(dir / "model.safetensors", {{"model.embed.weight", "BF16", {2, 2}, 8, 'e'},
                                      {"lm_head.weight", "F32", {3}, 12, 'h'}});
  write_bytes(dir / "config.json", "{}");
  const auto ck = Checkpoint::open(dir.path());
  EXPECT_EQ(ck.dir(), dir.path());
  ASSERT_EQ(ck.files().size(), 1u);
  EXPECT_EQ(ck.files()[0]->path(), dir / "model.safetensors");
  ASSERT_EQ(ck.tensors().size(), 2u);
  EXPECT_EQ(ck.tensors().begin()->first, "lm_head.weight");  // name order
  EXPECT_EQ(ck.total_bytes(), 20u);
  EXPECT_TRUE(ck.warnings().empty());

  const TensorRef& e = ck.at("model.embed.weight");
  EXPECT_EQ(e.info->dtype, DType::BF16);
  EXPECT_EQ(e.file, ck.files()[0].get());
  EXPECT_EQ(as_string(e.bytes()), std::string(8, 'e'));
  EXPECT_EQ(ck.find("lm_head.weight")->info->nbytes(), 12u);
  EXPECT_EQ(ck.find("nope"), nullptr);
}

TEST(CheckpointSingle, MissingTensorNamesTheTensorAndCheckpoint) {
  TempDir dir;
  st_file(dir / "model.safetensors", {{"a", "U8", {1}, 1}});
  const auto ck = Checkpoint::open(dir.path());
  const std::string msg = error_of([&] { ck.at("model.layers.0.mlp.gate.weight"); });
  EXPECT_CONTAINS(msg, "tensor 'model.layers.0.mlp.gate.weight' not found");
  EXPECT_CONTAINS(msg, dir.path().string());
}

TEST(CheckpointSingle, FallsBackToTheOnlySafetensorsFile) {
  TempDir dir;
  st_file(dir / "consolidated.safetensors", {{"w", "F16", {4}, 8}});
  const auto ck = Checkpoint::open(dir.path());
  ASSERT_EQ(ck.files().size(), 1u);
  EXPECT_EQ(ck.files()[0]->path(), dir / "consolidated.safetensors");
  EXPECT_NE(ck.find("w"), nullptr);
}

TEST(CheckpointSingle, ModelSafetensorsWinsOverOtherFiles) {
  TempDir dir;
  st_file(dir / "model.safetensors", {{"w", "U8", {1}, 1}});
  st_file(dir / "backup.safetensors", {{"old", "U8", {1}, 1}});
  const auto ck = Checkpoint::open(dir.path());
  EXPECT_NE(ck.find("w"), nullptr);
  EXPECT_EQ(ck.find("old"), nullptr);
}

TEST(CheckpointSingle, SeveralFilesWithoutAnIndex) {
  TempDir dir;
  st_file(dir / "part-a.safetensors", {{"a", "U8", {1}, 1}});
  st_file(dir / "part-b.safetensors", {{"b", "U8", {1}, 1}});
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, dir.path().string());
  EXPECT_CONTAINS(msg, "2 .safetensors files (part-a.safetensors, part-b.safetensors) but no model.safetensors.index.json");
}

TEST(CheckpointSingle, NoWeightsAtAll) {
  TempDir dir;
  write_bytes(dir / "config.json", "{}");
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, dir.path().string());
  EXPECT_CONTAINS(msg, "no weights");
}

TEST(CheckpointSingle, FileWithoutTensors) {
  TempDir dir;
  write_st(dir / "model.safetensors", "{}      ");
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, "no weights: " + (dir / "model.safetensors").string() + " hold no tensors");
}

TEST(CheckpointSingle, NotADirectory) {
  TempDir dir;
  const auto file = st_file(dir / "model.safetensors", {{"a", "U8", {1}, 1}});
  EXPECT_CONTAINS(open_error(file), file.string() + ": not a directory");
  EXPECT_CONTAINS(open_error(dir / "absent"), "not a directory");
}

TEST(CheckpointSingle, MalformedFileErrorNamesFileAndTensor) {
  TempDir dir;
  write_st(dir / "model.safetensors", R"({"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", "short");
  const std::string msg = open_error(dir.path());
  EXPECT_CONTAINS(msg, (dir / "model.safetensors").string() + ": tensor 'w'");
}

// ---------------------------------------------------------------------------------------------
// Sharded

class CheckpointSharded : public ::testing::Test {
 protected:
  void SetUp() override {
    st_file(dir_ / "model-00001-of-00002.safetensors",
            {{"model.embed_tokens.weight", "BF16", {4, 2}, 16, 'E'}, {"model.norm.weight", "BF16", {2}, 4, 'N'}});
    st_file(dir_ / "model-00002-of-00002.safetensors", {{"lm_head.weight", "BF16", {4, 2}, 16, 'H'}});
  }
  void write_index(const std::string& weight_map) {
    write_bytes(index_, R"({"metadata":{"total_size":36},"weight_map":)" + weight_map + "}");
  }
  static constexpr const char* kGoodMap =
      R"({"model.embed_tokens.weight":"model-00001-of-00002.safetensors",)"
      R"("model.norm.weight":"model-00001-of-00002.safetensors",)"
      R"("lm_head.weight":"model-00002-of-00002.safetensors"})";

  TempDir dir_;
  std::filesystem::path index_ = dir_ / "model.safetensors.index.json";
};

TEST_F(CheckpointSharded, OpensAllShards) {
  write_index(kGoodMap);
  // Neither a stray file the index does not name nor a model.safetensors is looked at.
  st_file(dir_ / "extra.safetensors", {{"junk", "U8", {1}, 1}});
  st_file(dir_ / "model.safetensors", {{"other", "U8", {1}, 1}});
  const auto ck = Checkpoint::open(dir_.path());
  ASSERT_EQ(ck.files().size(), 2u);
  ASSERT_EQ(ck.tensors().size(), 3u);
  EXPECT_EQ(ck.find("junk"), nullptr);
  EXPECT_EQ(ck.find("other"), nullptr);
  EXPECT_EQ(ck.total_bytes(), 36u);
  EXPECT_TRUE(ck.warnings().empty());
  const TensorRef& head = ck.at("lm_head.weight");
  EXPECT_EQ(head.file->path(), dir_ / "model-00002-of-00002.safetensors");
  EXPECT_EQ(as_string(head.bytes()), std::string(16, 'H'));
  EXPECT_EQ(as_string(ck.at("model.norm.weight").bytes()), "NNNN");
  EXPECT_EQ(ck.at("model.norm.weight").file, ck.at("model.embed_tokens.weight").file);
}

TEST_F(CheckpointSharded, ShardNamesAreNormalised) {
  write_index(R"({"model.embed_tokens.weight":"./model-00001-of-00002.safetensors",)"
              R"("model.norm.weight":"model-00001-of-00002.safetensors",)"
              R"("lm_head.weight":"model-00002-of-00002.safetensors"})");
  const auto ck = Checkpoint::open(dir_.path());
  EXPECT_EQ(ck.files().size(), 2u);
  EXPECT_EQ(ck.tensors().size(), 3u);
}

TEST_F(CheckpointSharded, IndexIsNotValidJson) {
  write_bytes(index_, R"({"weight_map": {"a": )");
  const std::string msg = open_error(dir_.path());
  EXPECT_CONTAINS(msg, index_.string() + ": not valid JSON");
}

TEST_F(CheckpointSharded, IndexIsNotAnObject) {
  write_bytes(index_, "[]");
  EXPECT_CONTAINS(open_error(dir_.path()), index_.string() + ": not a JSON object (it is array)");
}

TEST_F(CheckpointSharded, IndexWithoutWeightMap) {
  write_bytes(index_, R"({"metadata":{}})");
  EXPECT_CONTAINS(open_error(dir_.path()), index_.string() + ": has no 'weight_map'");
  write_bytes(index_, R"({"weight_map":["a"]})");
  EXPECT_CONTAINS(open_error(dir_.path()), index_.string() + ": 'weight_map' is not an object (it is array)");
}

TEST_F(CheckpointSharded, EmptyWeightMapMeansNoWeights) {
  write_index("{}");
  EXPECT_CONTAINS(open_error(dir_.path()), index_.string() + ": 'weight_map' is empty: no weights");
}

TEST_F(CheckpointSharded, WeightMapValueIsNotAFileName) {
  write_index(R"({"lm_head.weight":7})");
  EXPECT_CONTAINS(open_error(dir_.path()),
                  index_.string() + ": tensor 'lm_head.weight': weight_map value is not a file name (it is 7)");
  write_index(R"({"lm_head.weight":"../elsewhere/model.safetensors"})");
  EXPECT_CONTAINS(open_error(dir_.path()), "tensor 'lm_head.weight': shard '../elsewhere/model.safetensors' is not "
                                           "a file name inside the checkpoint folder");
  write_index(R"({"lm_head.weight":"/etc/model.safetensors"})");
  EXPECT_CONTAINS(open_error(dir_.path()), "tensor 'lm_head.weight': shard '/etc/model.safetensors' is not");
}

TEST_F(CheckpointSharded, IndexNamesAMissingShard) {
  write_index(R"({"model.embed_tokens.weight":"model-00001-of-00002.safetensors",)"
              R"("model.norm.weight":"model-00001-of-00002.safetensors",)"
              R"("lm_head.weight":"model-00002-of-00003.safetensors"})");
  const std::string msg = open_error(dir_.path());
  EXPECT_CONTAINS(msg, index_.string());
  EXPECT_CONTAINS(msg, "tensor 'lm_head.weight' is mapped to shard 'model-00002-of-00003.safetensors', but " +
                           (dir_ / "model-00002-of-00003.safetensors").string() + " does not exist");
}

TEST_F(CheckpointSharded, IndexNamesATensorTheShardLacks) {
  write_index(R"({"model.embed_tokens.weight":"model-00001-of-00002.safetensors",)"
              R"("model.norm.weight":"model-00001-of-00002.safetensors",)"
              R"("model.layers.0.self_attn.q_proj.weight":"model-00002-of-00002.safetensors",)"
              R"("lm_head.weight":"model-00002-of-00002.safetensors"})");
  const std::string msg = open_error(dir_.path());
  EXPECT_CONTAINS(msg, index_.string() + ": tensor 'model.layers.0.self_attn.q_proj.weight' is mapped to " +
                           (dir_ / "model-00002-of-00002.safetensors").string() + ", which has no such tensor");
}

TEST_F(CheckpointSharded, IndexMapsATensorToTheWrongShard) {
  write_index(R"({"model.embed_tokens.weight":"model-00001-of-00002.safetensors",)"
              R"("model.norm.weight":"model-00002-of-00002.safetensors",)"
              R"("lm_head.weight":"model-00002-of-00002.safetensors"})");
  const std::string msg = open_error(dir_.path());
  EXPECT_CONTAINS(msg, "tensor 'model.norm.weight' is mapped to " +
                           (dir_ / "model-00002-of-00002.safetensors").string() + ", which has no such tensor (it is in " +
                           (dir_ / "model-00001-of-00002.safetensors").string() + ")");
}

TEST_F(CheckpointSharded, WithSeveralFaultsTheErrorNamesTheSmallestTensorWhateverTheIndexOrder) {
  // The index is read in document order now, not name order: each error still names the tensor a
  // walk in name order would meet first, here listed last.
  write_index(R"({"model.norm.weight":"model-00002-of-00002.safetensors",)"
              R"("model.embed_tokens.weight":"model-00002-of-00002.safetensors",)"
              R"("lm_head.weight":"model-00002-of-00002.safetensors"})");
  EXPECT_CONTAINS(open_error(dir_.path()), "tensor 'model.embed_tokens.weight' is mapped to ");
  write_index(R"({"z.weight":"../b.safetensors","model.norm.weight":"model-00001-of-00002.safetensors",)"
              R"("a.weight":"/a.safetensors"})");
  EXPECT_CONTAINS(open_error(dir_.path()), "tensor 'a.weight': shard '/a.safetensors' is not");
  write_index(R"({"z.weight":"missing.safetensors","lm_head.weight":"model-00002-of-00002.safetensors",)"
              R"("b.weight":"missing.safetensors"})");
  EXPECT_CONTAINS(open_error(dir_.path()), "tensor 'b.weight' is mapped to shard 'missing.safetensors', but");
}

TEST_F(CheckpointSharded, UnlistedShardTensorIsLoadedWithAWarning) {
  write_index(R"({"model.embed_tokens.weight":"model-00001-of-00002.safetensors",)"
              R"("lm_head.weight":"model-00002-of-00002.safetensors"})");
  const auto ck = Checkpoint::open(dir_.path());
  ASSERT_NE(ck.find("model.norm.weight"), nullptr);
  EXPECT_EQ(as_string(ck.at("model.norm.weight").bytes()), "NNNN");
  ASSERT_EQ(ck.warnings().size(), 1u);
  EXPECT_CONTAINS(ck.warnings()[0], (dir_ / "model-00001-of-00002.safetensors").string() +
                                        ": tensor 'model.norm.weight' is not listed in " + index_.string());
}

TEST_F(CheckpointSharded, DuplicateTensorAcrossShards) {
  st_file(dir_ / "model-00002-of-00002.safetensors",
          {{"lm_head.weight", "BF16", {4, 2}, 16, 'H'}, {"model.norm.weight", "BF16", {2}, 4, 'M'}});
  write_index(kGoodMap);
  const std::string msg = open_error(dir_.path());
  EXPECT_CONTAINS(msg, "tensor 'model.norm.weight' appears in both " +
                           (dir_ / "model-00001-of-00002.safetensors").string() + " and " +
                           (dir_ / "model-00002-of-00002.safetensors").string());
}

TEST_F(CheckpointSharded, MalformedShardNamesTheShardAndTensor) {
  write_st(dir_ / "model-00002-of-00002.safetensors",
           R"({"lm_head.weight":{"dtype":"BF16","shape":[4,2],"data_offsets":[0,12]}})", std::string(12, 'H'));
  write_index(kGoodMap);
  const std::string msg = open_error(dir_.path());
  EXPECT_CONTAINS(msg, (dir_ / "model-00002-of-00002.safetensors").string() + ": tensor 'lm_head.weight': data_offsets");
}

}  // namespace
}  // namespace fp4serve
