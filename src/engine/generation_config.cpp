#include "engine/generation_config.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace fp4serve::engine {

namespace {

using nlohmann::json;

// The number at `key`, or nullopt when absent or null; `lo`/`hi` bound it (inclusive).
std::optional<double> number_field(const json& doc, const char* key, double lo, double hi, const std::string& file) {
  const auto it = doc.find(key);
  if (it == doc.end() || it->is_null()) return std::nullopt;
  if (!it->is_number()) fail(file, ": ", key, " must be a number, got ", it->dump());
  const double v = it->get<double>();
  if (!std::isfinite(v) || v < lo || v > hi) fail(file, ": ", key, " = ", v, " is outside [", lo, ", ", hi, "]");
  return v;
}

}  // namespace

std::string SamplingDefaults::describe() const {
  if (empty()) return "none";
  std::ostringstream os;
  const char* sep = "";
  auto put = [&](const char* name, const auto& v) {
    if (!v) return;
    os << sep << name << '=' << *v;
    sep = " ";
  };
  put("temperature", temperature);
  put("top_p", top_p);
  put("top_k", top_k);
  put("min_p", min_p);
  put("repetition_penalty", repetition_penalty);
  return os.str();
}

GenerationConfig read_generation_config(const std::filesystem::path& dir) {
  const std::filesystem::path path = dir / "generation_config.json";
  const std::string file = path.string();
  GenerationConfig out;
  std::ifstream in(path);
  if (!in) return out;
  json doc;
  try {
    doc = json::parse(in);
  } catch (const json::exception& e) {
    fail(file, ": not valid JSON: ", e.what());
  }
  if (!doc.is_object()) fail(file, ": must be a JSON object");

  if (const auto it = doc.find("eos_token_id"); it != doc.end() && !it->is_null()) {
    auto add = [&](const json& v) {
      if (!v.is_number_integer() || v.get<std::int64_t>() < 0 || v.get<std::int64_t>() > INT32_MAX)
        fail(file, ": eos_token_id must be a token id or a list of token ids, got ", v.dump());
      out.eos_token_ids.push_back(v.get<std::int32_t>());
    };
    if (it->is_array()) {
      for (const json& v : *it) add(v);
    } else {
      add(*it);
    }
  }

  SamplingDefaults& s = out.sampling;
  s.temperature = number_field(doc, "temperature", 0.0, 1e6, file);
  s.top_p = number_field(doc, "top_p", 0.0, 1.0, file);
  if (s.top_p && *s.top_p == 0.0) fail(file, ": top_p must be in (0, 1], got 0");
  s.min_p = number_field(doc, "min_p", 0.0, 1.0, file);
  s.repetition_penalty = number_field(doc, "repetition_penalty", 0.0, 1e6, file);
  if (s.repetition_penalty && *s.repetition_penalty == 0.0) fail(file, ": repetition_penalty must be > 0, got 0");
  if (const auto it = doc.find("top_k"); it != doc.end() && !it->is_null()) {
    if (!it->is_number_integer() || it->get<std::int64_t>() < -1)
      fail(file, ": top_k must be an integer >= -1 (-1 or 0 = off), got ", it->dump());
    s.top_k = std::max<std::int64_t>(0, it->get<std::int64_t>());
  }
  // transformers' do_sample = false means greedy whatever the other fields say.
  if (const auto it = doc.find("do_sample"); it != doc.end() && it->is_boolean() && !it->get<bool>()) s.temperature = 0.0;
  return out;
}

}  // namespace fp4serve::engine
