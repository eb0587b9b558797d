// `fp4serve doctor`'s report, end to end below the CLI: build facts, CPU features, every backend
// with a verdict, and with a model directory, validation on that model's shapes.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/temp_dir.h"
#include "kernels/backend.h"
#include "kernels/doctor_report.h"
#include "util/cpu_features.h"
#include "util/huge_pages.h"

namespace fp4serve::kernels {
namespace {

DoctorOptions quiet() {
  DoctorOptions o;
  o.backends.seed = 77;
  o.backends.inject_faults = "";
  return o;
}

TEST(Doctor, ReportsBuildCpuAndEveryBackend) {
  const nlohmann::json j = doctor_report(quiet());
  EXPECT_EQ(j["schema"], "fp4serve.doctor/1");
  EXPECT_TRUE(j["ok"].get<bool>());
  for (const char* key : {"version", "git_revision", "compiler", "build_type", "cxx_flags", "kernel_flags"})
    EXPECT_TRUE(j["fp4serve"].contains(key)) << key;
  // The flags of each instruction-set folder, as the build passed them.
  const auto& flags = j["fp4serve"]["kernel_flags"];
  EXPECT_NE(flags["avx2"].get<std::string>().find("-mavx2"), std::string::npos) << flags.dump();
  EXPECT_NE(flags["avx512"].get<std::string>().find("-mavx512f"), std::string::npos) << flags.dump();
  EXPECT_NE(flags["vnni"].get<std::string>().find("-mavx512vnni"), std::string::npos) << flags.dump();
  EXPECT_NE(flags["amx"].get<std::string>().find("-mamx-tile"), std::string::npos) << flags.dump();
  EXPECT_FALSE(j["os"]["release"].get<std::string>().empty());
  // The THP mode is the bracketed word the kernel shows, which is also what mapping relies on.
  const std::string thp = j["os"]["transparent_huge_pages"].get<std::string>();
  EXPECT_TRUE(thp == "always" || thp == "madvise" || thp == "never" || thp == "unavailable") << thp;
  EXPECT_EQ(thp == "always" || thp == "madvise", transparent_huge_pages_available()) << thp;
  for (CpuFeature f : all_cpu_features()) {
    const auto& entry = j["cpu"]["features"][std::string(cpu_feature_name(f))];
    EXPECT_EQ(entry["usable"].get<bool>(), cpu_features().usable(f)) << cpu_feature_name(f);
  }
  ASSERT_EQ(j["backends"].size(), compiled_backends().size());
  for (const auto& b : j["backends"]) {
    const Backend* be = find_backend(b["name"].get<std::string>());
    ASSERT_NE(be, nullptr);
    EXPECT_EQ(b["supported"].get<bool>(), cpu_features().missing(be->needs).empty());
  }
  // Every supported backend has a passing verdict in every family it implements.
  for (const auto& fam : j["validation"]["families"]) {
    EXPECT_FALSE(fam["chosen"].is_null());
    for (const auto& c : fam["candidates"]) {
      const Backend* be = find_backend(c["backend"].get<std::string>());
      if (!cpu_features().missing(be->needs).empty()) {
        EXPECT_EQ(c["status"], "unsupported");
        continue;
      }
      EXPECT_EQ(c["status"], "passed") << fam["family"] << " " << c["backend"] << ": " << c["reason"];
      EXPECT_LE(c["error"].get<double>(), c["tolerance"].get<double>());
      EXPECT_GT(c["seconds"].get<double>(), 0.0);
    }
  }
  const std::string text = doctor_text(j);
  EXPECT_NE(text.find("Validation on built-in shapes"), std::string::npos) << text;
  EXPECT_NE(text.find("fp4-gemm -> "), std::string::npos) << text;
}

TEST(Doctor, ThisMachineListsItsSimdBackends) {
  // Each SIMD backend is listed, and marked supported exactly when this CPU runs its key
  // instructions: all three on an AMX Xeon, avx2 alone on an AVX2-only EPYC.
  const CpuFeatures& c = cpu_features();
  const nlohmann::json j = doctor_report(quiet());
  const std::pair<const char*, bool> expected[] = {
      {"avx2", c.usable(CpuFeature::AVX2) && c.usable(CpuFeature::FMA)},
      {"avx512", c.usable(CpuFeature::AVX512F) && c.usable(CpuFeature::AVX512BW)},
      {"amx", c.usable(CpuFeature::AMX_TILE) && c.usable(CpuFeature::AVX512F)},
  };
  for (const auto& [name, runs] : expected) {
    int listed = 0;
    for (const auto& b : j["backends"])
      if (b["name"] == name) {
        ++listed;
        EXPECT_EQ(b["supported"].get<bool>(), runs) << name << ": " << b.dump();
      }
    EXPECT_EQ(listed, 1) << name;
  }
}

// A one-layer Qwen3-MoE checkpoint, BF16 zeros: doctor needs its shapes only.
void write_tiny_model(const testing::TempDir& dir) {
  nlohmann::json cfg = {{"architectures", {"Qwen3MoeForCausalLM"}},
                        {"model_type", "qwen3_moe"},
                        {"hidden_size", 64},
                        {"intermediate_size", 128},
                        {"head_dim", 16},
                        {"num_attention_heads", 4},
                        {"num_key_value_heads", 2},
                        {"num_hidden_layers", 1},
                        {"num_experts", 4},
                        {"num_experts_per_tok", 2},
                        {"moe_intermediate_size", 32},
                        {"norm_topk_prob", true},
                        {"decoder_sparse_step", 1},
                        {"mlp_only_layers", nlohmann::json::array()},
                        {"vocab_size", 256},
                        {"max_position_embeddings", 4096},
                        {"rms_norm_eps", 1e-6},
                        {"rope_theta", 1000000.0},
                        {"tie_word_embeddings", false},
                        {"bos_token_id", 1},
                        {"eos_token_id", 2}};
  dir.write("config.json", cfg.dump());
  struct T {
    std::string name;
    std::int64_t rows, cols;
  };
  std::vector<T> tensors = {{"model.embed_tokens.weight", 256, 64},         {"model.layers.0.self_attn.q_proj.weight", 64, 64},
                            {"model.layers.0.self_attn.k_proj.weight", 32, 64}, {"model.layers.0.self_attn.v_proj.weight", 32, 64},
                            {"model.layers.0.self_attn.o_proj.weight", 64, 64}, {"model.layers.0.mlp.gate.weight", 4, 64},
                            {"lm_head.weight", 256, 64}};
  for (int e = 0; e < 4; ++e)
    for (const char* p : {"gate_proj", "up_proj", "down_proj"}) {
      const bool down = std::string(p) == "down_proj";
      tensors.push_back({"model.layers.0.mlp.experts." + std::to_string(e) + "." + p + ".weight", down ? 64 : 32, down ? 32 : 64});
    }
  std::string header = "{", data;
  for (const auto& t : tensors) {
    const std::size_t bytes = static_cast<std::size_t>(t.rows * t.cols * 2);
    header += (header.size() > 1 ? "," : "") + std::string("\"") + t.name + "\":{\"dtype\":\"BF16\",\"shape\":[" +
              std::to_string(t.rows) + "," + std::to_string(t.cols) + "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
              std::to_string(data.size() + bytes) + "]}";
    data.append(bytes, '\0');
  }
  header += "}";
  std::string file;
  const auto n = static_cast<std::uint64_t>(header.size());
  for (int i = 0; i < 8; ++i) file.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  file += header + data;
  dir.write("model.safetensors", file);
}

TEST(Doctor, ValidatesOnAModelsShapes) {
  testing::TempDir dir;
  write_tiny_model(dir);
  DoctorOptions o = quiet();
  o.model_dir = dir.path();
  const nlohmann::json j = doctor_report(o);
  ASSERT_TRUE(j["ok"].get<bool>()) << j["error"];
  EXPECT_EQ(j["model"]["arch"], "qwen3_moe");
  const auto& v = j["validation"];
  EXPECT_NE(v["shapes_source"].get<std::string>().find(dir.path().string()), std::string::npos);
  bool saw_moe = false;
  for (const auto& fam : v["families"]) {
    if (fam["family"] == "moe") {
      saw_moe = true;
      EXPECT_NE(fam["shapes"][0].get<std::string>().find("4 experts top-2"), std::string::npos) << fam["shapes"];
    }
    if (fam["family"] == "fp4-gemm") {
      EXPECT_TRUE(fam["chosen"].is_null()) << "an unquantized model runs no NVFP4 GEMM";
    }
    if (fam["family"] == "dense") {
      EXPECT_FALSE(fam["chosen"].is_null());
    }
  }
  EXPECT_TRUE(saw_moe);
}

TEST(Doctor, FailedValidationIsReportedNotThrown) {
  DoctorOptions o = quiet();
  std::string spec;
  for (const Backend& b : compiled_backends()) spec += (spec.empty() ? "" : ",") + b.name + "/attention:zeros";
  o.backends.inject_faults = spec;
  const nlohmann::json j = doctor_report(o);
  EXPECT_FALSE(j["ok"].get<bool>());
  EXPECT_NE(j["error"].get<std::string>().find("no attention backend passed validation"), std::string::npos) << j["error"];
  EXPECT_NE(doctor_text(j).find("Validation FAILED"), std::string::npos);
}

}  // namespace
}  // namespace fp4serve::kernels
