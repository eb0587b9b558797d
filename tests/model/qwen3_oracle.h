#pragma once
// The transformers oracle fixtures of tests/data/oracle/ (written by tools/make_oracle_fixtures.py):
// one tiny checkpoint per folder plus what transformers computed on it, per variant ("default":
// fp32 activations on the stored weights, W4A16 for NVFP4; "w4a4": NVFP4 with activations
// fake-quantized as vLLM's emulation does). Shared by the model and engine tests.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "formats/safetensors_writer.h"
#include "kernels/kernels.h"
#include "kernels/registry.h"
#include "model/causal_lm.h"
#include "model/model_weights.h"
#include "util/error.h"

namespace fp4serve::oracle {

namespace fs = std::filesystem;

// `set` is the folder under tests/data: "oracle" (qwen3 / qwen3_moe) or "oracle_hybrid"
// (qwen3_5_moe / qwen3_next, tools/make_hybrid_oracle_fixtures.py); same format.
inline fs::path root(const std::string& set = "oracle") { return fs::path(FP4SERVE_TEST_DATA) / set; }

struct Case {
  std::string fixture;  // folder name
  std::string variant;  // "default" or "w4a4"
  std::string set = "oracle";
  fs::path dir() const { return root(set) / fixture; }
  std::string label() const { return fixture + "_" + variant; }
  kernels::Fp4Semantics semantics() const {
    return variant == "w4a4" ? kernels::Fp4Semantics::W4A4 : kernels::Fp4Semantics::W4A16;
  }
};

inline nlohmann::json read_json(const fs::path& path) {
  std::ifstream in(path);
  if (!in) fail("cannot open ", path.string());
  return nlohmann::json::parse(in);
}

// Every (fixture, variant) pair, in folder-name order.
inline std::vector<Case> cases(const std::string& set = "oracle") {
  std::vector<Case> out;
  if (!fs::exists(root(set))) return out;
  std::vector<fs::path> dirs;
  for (const auto& e : fs::directory_iterator(root(set)))
    if (fs::exists(e.path() / "oracle.json")) dirs.push_back(e.path());
  std::sort(dirs.begin(), dirs.end());
  for (const fs::path& d : dirs) {
    const nlohmann::json doc = read_json(d / "oracle.json");
    for (const auto& [variant, _] : doc.at("variants").items()) out.push_back({d.filename().string(), variant, set});
  }
  return out;
}

// The fixture's model with the kernels `auto` selects on this machine (validated with `seed`),
// kept to the fp32 class (--exact-activations) so that logits are judged at the fp32 tolerance.
inline std::unique_ptr<CausalLM> open_with_auto_kernels(const Case& c, std::uint64_t seed) {
  ModelWeights weights = load_model_weights(c.dir());
  kernels::BackendOptions options;
  options.seed = seed;
  options.exact_activations = true;
  const auto selection = kernels::select_kernels(options, weights.config, weights.quantization);
  return make_causal_lm(std::move(weights), selection->kernels(), c.semantics());
}

struct Data {
  std::vector<std::int32_t> prompt_ids;
  std::vector<std::int32_t> greedy_ids;  // the greedy continuation
  std::vector<std::int32_t> ids;         // prompt + continuation: the positions of `logits`
  std::string greedy_text;
  std::int64_t vocab = 0;
  std::vector<float> logits;  // [ids.size(), vocab], fp32 from transformers
  const float* row(std::size_t position) const { return logits.data() + position * static_cast<std::size_t>(vocab); }
};

inline Data load(const Case& c) {
  const nlohmann::json doc = read_json(c.dir() / "oracle.json");
  const nlohmann::json& v = doc.at("variants").at(c.variant);
  Data d;
  for (const auto& id : doc.at("prompt_ids")) d.prompt_ids.push_back(id.get<std::int32_t>());
  for (const auto& id : v.at("greedy_ids")) d.greedy_ids.push_back(id.get<std::int32_t>());
  d.greedy_text = v.at("greedy_text").get<std::string>();
  const SafetensorsFile st = SafetensorsFile::open(c.dir() / "oracle.safetensors");
  const TensorInfo* ids = st.find(c.variant + ".ids");
  const TensorInfo* logits = st.find(c.variant + ".logits");
  if (!ids || !logits || ids->dtype != DType::I64 || logits->dtype != DType::F32 || logits->shape.size() != 2)
    fail(c.dir().string(), "/oracle.safetensors: tensors of variant '", c.variant, "' are missing or malformed");
  const auto id_bytes = st.data(*ids);
  for (std::size_t i = 0; i < id_bytes.size() / 8; ++i) {
    std::int64_t id = 0;
    std::memcpy(&id, id_bytes.data() + 8 * i, 8);
    d.ids.push_back(static_cast<std::int32_t>(id));
  }
  d.vocab = logits->shape[1];
  const auto bytes = st.data(*logits);
  d.logits.resize(bytes.size() / 4);
  std::memcpy(d.logits.data(), bytes.data(), bytes.size());
  if (static_cast<std::int64_t>(d.ids.size()) != logits->shape[0] ||
      d.ids.size() != d.prompt_ids.size() + d.greedy_ids.size())
    fail(c.dir().string(), ": oracle positions disagree");
  return d;
}

// Error of one row of logits relative to the reference row's scale:
// max_j |ours_j - ref_j| / max_j |ref_j|.
inline double relative_error(const float* ours, const float* ref, std::int64_t n) {
  double diff = 0.0, scale = 0.0;
  for (std::int64_t j = 0; j < n; ++j) {
    diff = std::max(diff, std::abs(static_cast<double>(ours[j]) - ref[j]));
    scale = std::max(scale, std::abs(static_cast<double>(ref[j])));
  }
  return diff / std::max(scale, 1e-30);
}

inline std::int32_t argmax(const float* row, std::int64_t n) {
  return static_cast<std::int32_t>(std::max_element(row, row + n) - row);
}

// ---- Defective copies of a fixture, for load-error tests ----------------------------------------

struct Entry {
  TensorDecl decl;
  std::vector<std::uint8_t> data;
};
using Mutation = std::function<void(std::vector<Entry>&)>;

// Copies fixture `name` into `dir`, passing its tensors through `mutate` on the way.
inline void copy_with(const std::string& name, const fs::path& dir, const Mutation& mutate,
                      const std::string& set = "oracle") {
  const fs::path src = root(set) / name;
  for (const auto& e : fs::directory_iterator(src))
    if (e.path().filename() != "model.safetensors") fs::copy_file(e.path(), dir / e.path().filename());
  const SafetensorsFile in = SafetensorsFile::open(src / "model.safetensors");
  std::vector<Entry> entries;
  for (const TensorInfo& t : in.tensors()) {
    const auto bytes = in.data(t);
    entries.push_back({{t.name, t.dtype, t.shape}, {bytes.begin(), bytes.end()}});
  }
  mutate(entries);
  std::vector<TensorDecl> decls;
  for (const Entry& e : entries) decls.push_back(e.decl);
  SafetensorsWriter out(dir / "model.safetensors", decls);
  for (const Entry& e : entries) out.write(e.data);
  out.finish();
}

inline Entry& find(std::vector<Entry>& entries, const std::string& name) {
  for (Entry& e : entries)
    if (e.decl.name == name) return e;
  throw std::runtime_error("fixture has no tensor " + name);
}

inline void drop(std::vector<Entry>& entries, const std::string& name) {
  std::erase_if(entries, [&](const Entry& e) { return e.decl.name == name; });
}

}  // namespace fp4serve::oracle
