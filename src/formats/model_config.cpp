#include "formats/model_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "util/error.h"

namespace fp4serve {

using nlohmann::json;

namespace {

// One architecture the engine runs: the config's model_type and the class names HF writes in
// `architectures` for it.
struct ArchInfo {
  Arch arch;
  std::string_view model_type;
  std::vector<std::string_view> class_names;
};

const std::vector<ArchInfo>& arch_table() {
  static const std::vector<ArchInfo> table = {
      {Arch::Qwen3, "qwen3", {"Qwen3ForCausalLM"}},
      {Arch::Qwen3Moe, "qwen3_moe", {"Qwen3MoeForCausalLM"}},
      {Arch::Qwen3Next, "qwen3_next", {"Qwen3NextForCausalLM"}},
      {Arch::Qwen3_5Moe, "qwen3_5_moe", {"Qwen3_5MoeForConditionalGeneration", "Qwen3_5MoeForCausalLM"}},
  };
  return table;
}

std::string supported_model_types() {
  std::string out;
  for (const ArchInfo& info : arch_table()) {
    if (!out.empty()) out += ", ";
    out += info.model_type;
  }
  return out + " (and qwen3_5_moe_text)";
}

std::string supported_class_names() {
  std::string out;
  for (const ArchInfo& info : arch_table()) {
    for (std::string_view name : info.class_names) {
      if (!out.empty()) out += ", ";
      out += name;
    }
  }
  return out;
}

// Typed access to one JSON object with error messages naming the file and the field path.
class Fields {
 public:
  Fields(const json& obj, std::string_view source, std::string prefix)
      : obj_(obj), source_(source), prefix_(std::move(prefix)) {}

  // nullptr when absent or null (HF writes null for "unset").
  const json* get(const std::string& key) const {
    auto it = obj_.find(key);
    if (it == obj_.end() || it->is_null()) return nullptr;
    return &*it;
  }
  bool has(const std::string& key) const { return get(key) != nullptr; }

  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    fail(source_, ": field '", prefix_, key, "' ", what);
  }
  [[noreturn]] void wrong_type(const std::string& key, std::string_view expected, const json& got) const {
    bad(key, "must be " + std::string(expected) + ", got " + std::string(got.type_name()) + " " + got.dump());
  }

  std::int64_t integer(const std::string& key, const json& value) const {
    if (value.is_number_unsigned()) {  // checked first: is_number_integer() covers it too
      auto u = value.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) bad(key, "is out of range: " + value.dump());
      return static_cast<std::int64_t>(u);
    }
    if (value.is_number_integer()) return value.get<std::int64_t>();
    wrong_type(key, "an integer", value);
  }
  std::int64_t req_int(const std::string& key) const {
    const json* v = get(key);
    if (!v) bad(key, "is required but missing");
    return integer(key, *v);
  }
  std::optional<std::int64_t> opt_int(const std::string& key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    return integer(key, *v);
  }
  std::int64_t int_or(const std::string& key, std::int64_t fallback) const { return opt_int(key).value_or(fallback); }
  std::int64_t req_positive(const std::string& key) const {
    std::int64_t v = req_int(key);
    if (v <= 0) bad(key, "must be positive, got " + std::to_string(v));
    return v;
  }
  std::int64_t positive_or(const std::string& key, std::int64_t fallback) const {
    std::int64_t v = int_or(key, fallback);
    if (v <= 0) bad(key, "must be positive, got " + std::to_string(v));
    return v;
  }
  double number(const std::string& key, const json& value) const {
    if (!value.is_number()) wrong_type(key, "a number", value);
    return value.get<double>();
  }
  std::optional<double> opt_number(const std::string& key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    return number(key, *v);
  }
  bool boolean_or(const std::string& key, bool fallback) const {
    const json* v = get(key);
    if (!v) return fallback;
    if (!v->is_boolean()) wrong_type(key, "a boolean", *v);
    return v->get<bool>();
  }
  std::optional<std::string> opt_string(const std::string& key) const {
    const json* v = get(key);
    if (!v) return std::nullopt;
    if (!v->is_string()) wrong_type(key, "a string", *v);
    return v->get<std::string>();
  }
  const json* opt_object(const std::string& key) const {
    const json* v = get(key);
    if (v && !v->is_object()) wrong_type(key, "an object", *v);
    return v;
  }
  const json* opt_array(const std::string& key) const {
    const json* v = get(key);
    if (v && !v->is_array()) wrong_type(key, "an array", *v);
    return v;
  }
  std::vector<std::int64_t> int_list(const std::string& key) const {
    std::vector<std::int64_t> out;
    const json* v = opt_array(key);
    if (!v) return out;
    for (std::size_t i = 0; i < v->size(); ++i) {
      out.push_back(integer(key + "[" + std::to_string(i) + "]", (*v)[i]));
    }
    return out;
  }

  const std::string& prefix() const { return prefix_; }
  std::string_view source() const { return source_; }

 private:
  const json& obj_;
  std::string_view source_;
  std::string prefix_;
};

const ArchInfo* find_model_type(std::string_view model_type) {
  for (const ArchInfo& info : arch_table()) {
    if (info.model_type == model_type) return &info;
  }
  return nullptr;
}

LayerType parse_layer_type(const Fields& f, const std::string& key, const json& value) {
  if (!value.is_string()) f.wrong_type(key, "a string", value);
  const auto& s = value.get_ref<const std::string&>();
  if (s == "full_attention") return LayerType::FullAttention;
  if (s == "linear_attention") return LayerType::LinearAttention;
  f.bad(key, "has unknown layer type '" + s + "' (supported: full_attention, linear_attention)");
}

// rope_scaling / rope_parameters -> RopeScaling. `where` is the field name for messages.
RopeScaling parse_rope_scaling(const Fields& parent, const std::string& where, const json& obj,
                               std::int64_t max_position_embeddings) {
  Fields f(obj, parent.source(), parent.prefix() + where + ".");
  RopeScaling rs;
  std::optional<std::string> type = f.opt_string("rope_type");
  std::optional<std::string> legacy = f.opt_string("type");
  if (type && legacy && *type != *legacy) {
    f.bad("rope_type", "is '" + *type + "' but 'type' says '" + *legacy + "'");
  }
  std::string t = type ? *type : legacy.value_or("default");
  // Multimodal rope (Qwen2-VL style "mrope", Qwen3.5's mrope_section under "default"): for text
  // the three position streams are equal, which makes it plain 1-D rope.
  if (t == "default" || t == "mrope") {
    rs.type = "default";
    return rs;
  }
  const char* field = type ? "rope_type" : "type";
  if (t == "linear") {
    rs.type = "linear";
    std::optional<double> factor = f.opt_number("factor");
    if (!factor) f.bad("factor", "is required for rope type 'linear'");
    if (!(*factor > 0.0)) f.bad("factor", "must be positive");
    rs.factor = *factor;
    return rs;
  }
  if (t == "yarn") {
    rs.type = "yarn";
    std::optional<double> factor = f.opt_number("factor");
    if (!factor) f.bad("factor", "is required for rope type 'yarn'");
    if (!(*factor >= 1.0)) f.bad("factor", "must be >= 1 for yarn, got " + std::to_string(*factor));
    rs.factor = *factor;
    rs.original_max_position_embeddings = f.int_or("original_max_position_embeddings", max_position_embeddings);
    if (rs.original_max_position_embeddings <= 0) {
      f.bad("original_max_position_embeddings", "must be positive");
    }
    rs.beta_fast = f.opt_number("beta_fast").value_or(32.0);
    rs.beta_slow = f.opt_number("beta_slow").value_or(1.0);
    rs.attention_factor = f.opt_number("attention_factor").value_or(0.0);
    if (rs.attention_factor < 0.0) f.bad("attention_factor", "must not be negative");
    return rs;
  }
  f.bad(field, "has unsupported rope scaling type '" + t + "' (supported: default, linear, yarn)");
}

}  // namespace

std::string_view arch_name(Arch arch) {
  for (const ArchInfo& info : arch_table()) {
    if (info.arch == arch) return info.model_type;
  }
  return "unknown";
}

bool ModelConfig::is_moe_layer(std::int64_t layer) const {
  if (num_experts <= 0 || layer < 0 || layer >= num_hidden_layers) return false;
  if (std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) != mlp_only_layers.end()) {
    return false;
  }
  return decoder_sparse_step > 0 && (layer + 1) % decoder_sparse_step == 0;
}

std::int64_t ModelConfig::rotary_dim() const {
  // HF: int(head_dim * partial_rotary_factor).
  return static_cast<std::int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
}

ModelConfig parse_model_config(const json& doc, std::string_view source) {
  if (!doc.is_object()) fail(source, ": expected a JSON object at the top level, got ", doc.type_name());
  Fields top(doc, source, "");
  ModelConfig cfg;

  std::optional<std::string> top_type = top.opt_string("model_type");
  if (!top_type) {
    top.bad("model_type", "is required but missing (supported: " + supported_model_types() + ")");
  }
  cfg.model_type = *top_type;

  const json* text = top.opt_object("text_config");
  const json* body = &doc;
  std::string prefix;
  const ArchInfo* info = nullptr;
  if (*top_type == "qwen3_5_moe_text") {
    // A text-only conversion that kept the inner model_type at the top.
    info = find_model_type("qwen3_5_moe");
    cfg.weight_prefix = "model.";
  } else {
    info = find_model_type(*top_type);
    if (!info) {
      top.bad("model_type",
              "is '" + *top_type + "', which is not supported (supported: " + supported_model_types() + ")");
    }
    cfg.weight_prefix = "model.";
    if (info->arch == Arch::Qwen3_5Moe && text) {
      body = text;
      prefix = "text_config.";
      cfg.weight_prefix = "model.language_model.";
    }
  }
  cfg.arch = info->arch;  // a flat qwen3_5_moe (no text_config) keeps the "model." prefix

  // `architectures` must agree with model_type when present.
  if (const json* archs = top.opt_array("architectures")) {
    for (std::size_t i = 0; i < archs->size(); ++i) {
      const json& a = (*archs)[i];
      std::string key = "architectures[" + std::to_string(i) + "]";
      if (!a.is_string()) top.wrong_type(key, "a string", a);
      const auto& name = a.get_ref<const std::string&>();
      const ArchInfo* owner = nullptr;
      for (const ArchInfo& candidate : arch_table()) {
        for (std::string_view cls : candidate.class_names) {
          if (cls == name) owner = &candidate;
        }
      }
      if (!owner) {
        top.bad(key, "is '" + name + "', which is not supported (supported: " + supported_class_names() + ")");
      }
      if (owner->arch != cfg.arch) {
        top.bad(key, "is '" + name + "' but model_type is '" + cfg.model_type + "'");
      }
    }
  }

  Fields f(*body, source, prefix);
  if (text) {
    std::optional<std::string> inner = f.opt_string("model_type");
    if (inner && *inner != "qwen3_5_moe_text" && *inner != "qwen3_5_moe") {
      f.bad("model_type", "is '" + *inner + "', expected 'qwen3_5_moe_text'");
    }
  }
  const bool hybrid = cfg.arch == Arch::Qwen3Next || cfg.arch == Arch::Qwen3_5Moe;
  const bool moe = cfg.arch != Arch::Qwen3;

  cfg.vocab_size = f.req_positive("vocab_size");
  cfg.hidden_size = f.req_positive("hidden_size");
  cfg.num_hidden_layers = f.req_positive("num_hidden_layers");
  cfg.num_attention_heads = f.req_positive("num_attention_heads");
  cfg.num_key_value_heads = f.positive_or("num_key_value_heads", cfg.num_attention_heads);
  if (cfg.num_attention_heads % cfg.num_key_value_heads != 0) {
    f.bad("num_key_value_heads", "(" + std::to_string(cfg.num_key_value_heads) + ") must divide num_attention_heads (" +
                                     std::to_string(cfg.num_attention_heads) + ")");
  }
  if (f.has("head_dim")) {
    cfg.head_dim = f.req_positive("head_dim");
  } else {
    if (cfg.hidden_size % cfg.num_attention_heads != 0) {
      f.bad("head_dim", "is missing and hidden_size (" + std::to_string(cfg.hidden_size) +
                            ") is not a multiple of num_attention_heads (" + std::to_string(cfg.num_attention_heads) +
                            ")");
    }
    cfg.head_dim = cfg.hidden_size / cfg.num_attention_heads;
  }
  cfg.max_position_embeddings = f.positive_or("max_position_embeddings", 32768);
  cfg.rms_norm_eps = f.opt_number("rms_norm_eps").value_or(1e-6);
  if (!(cfg.rms_norm_eps > 0.0)) f.bad("rms_norm_eps", "must be positive");

  // tie_word_embeddings: the top-level value (what the HF model class reads) wins.
  if (top.has("tie_word_embeddings")) {
    cfg.tie_word_embeddings = top.boolean_or("tie_word_embeddings", false);
  } else {
    cfg.tie_word_embeddings = f.boolean_or("tie_word_embeddings", false);
  }
  cfg.attention_bias = f.boolean_or("attention_bias", false);
  cfg.attn_output_gate = f.boolean_or("attn_output_gate", hybrid);
  cfg.zero_centered_norm = hybrid;
  if (f.boolean_or("use_sliding_window", false)) {
    f.bad("use_sliding_window", "is true; sliding-window attention is not supported");
  }

  // Rope: transformers v5 moves rope_theta / partial_rotary_factor / scaling into rope_parameters.
  const json* rope_params = f.opt_object("rope_parameters");
  std::optional<double> theta;
  std::optional<double> partial;
  if (rope_params) {
    Fields rp(*rope_params, source, prefix + "rope_parameters.");
    theta = rp.opt_number("rope_theta");
    partial = rp.opt_number("partial_rotary_factor");
  }
  if (!theta) theta = f.opt_number("rope_theta");
  if (!partial) partial = f.opt_number("partial_rotary_factor");
  cfg.rope_theta = theta.value_or(10000.0);
  if (!(cfg.rope_theta > 0.0)) f.bad("rope_theta", "must be positive");
  cfg.partial_rotary_factor = partial.value_or(hybrid ? 0.25 : 1.0);
  if (!(cfg.partial_rotary_factor > 0.0 && cfg.partial_rotary_factor <= 1.0)) {
    f.bad("partial_rotary_factor", "must be in (0, 1], got " + std::to_string(cfg.partial_rotary_factor));
  }
  const std::int64_t rdim = cfg.rotary_dim();
  if (rdim < 2 || rdim % 2 != 0) {
    f.bad("partial_rotary_factor", "gives rotary dim " + std::to_string(rdim) + " for head_dim " +
                                       std::to_string(cfg.head_dim) + "; it must be even and >= 2");
  }
  if (const json* scaling = f.opt_object("rope_scaling")) {
    cfg.rope_scaling = parse_rope_scaling(f, "rope_scaling", *scaling, cfg.max_position_embeddings);
  }
  if (rope_params) {
    RopeScaling from_params = parse_rope_scaling(f, "rope_parameters", *rope_params, cfg.max_position_embeddings);
    if (from_params.type != "default") {
      if (cfg.rope_scaling.type != "default" && cfg.rope_scaling.type != from_params.type) {
        f.bad("rope_parameters",
              "says rope type '" + from_params.type + "' but rope_scaling says '" + cfg.rope_scaling.type + "'");
      }
      cfg.rope_scaling = from_params;
    }
  }

  // Dense MLP width: needed by qwen3 and by any non-MoE layer of an MoE model.
  if (cfg.arch == Arch::Qwen3) {
    cfg.intermediate_size = f.req_positive("intermediate_size");
  } else if (f.has("intermediate_size")) {
    cfg.intermediate_size = f.req_positive("intermediate_size");
  }

  if (moe) {
    // transformers 5 saves Qwen3-MoE's expert count as `num_local_experts`; hub files say `num_experts`.
    cfg.num_experts = f.req_positive(f.has("num_experts") || !f.has("num_local_experts") ? "num_experts" : "num_local_experts");
    cfg.num_experts_per_tok = f.req_positive("num_experts_per_tok");
    if (cfg.num_experts_per_tok > cfg.num_experts) {
      f.bad("num_experts_per_tok", "(" + std::to_string(cfg.num_experts_per_tok) + ") exceeds num_experts (" +
                                       std::to_string(cfg.num_experts) + ")");
    }
    cfg.moe_intermediate_size = f.req_positive("moe_intermediate_size");
    if (hybrid) cfg.shared_expert_intermediate_size = f.req_positive("shared_expert_intermediate_size");
    if (cfg.arch == Arch::Qwen3_5Moe) {
      // Qwen3.5's router always renormalizes the top-k probabilities; there is no field.
      cfg.norm_topk_prob = true;
    } else {
      cfg.norm_topk_prob = f.boolean_or("norm_topk_prob", cfg.arch == Arch::Qwen3Next);
    }
    cfg.decoder_sparse_step = f.positive_or("decoder_sparse_step", 1);
    cfg.mlp_only_layers = f.int_list("mlp_only_layers");
    for (std::size_t i = 0; i < cfg.mlp_only_layers.size(); ++i) {
      std::int64_t layer = cfg.mlp_only_layers[i];
      if (layer < 0 || layer >= cfg.num_hidden_layers) {
        f.bad("mlp_only_layers[" + std::to_string(i) + "]",
              "is " + std::to_string(layer) +
                  ", outside [0, num_hidden_layers=" + std::to_string(cfg.num_hidden_layers) + ")");
      }
    }
    bool any_dense = false;
    for (std::int64_t l = 0; l < cfg.num_hidden_layers; ++l) any_dense = any_dense || !cfg.is_moe_layer(l);
    if (any_dense && cfg.intermediate_size <= 0) {
      f.bad("intermediate_size", "is required: some layers use a dense MLP (mlp_only_layers / decoder_sparse_step)");
    }
  }

  // Layer types.
  if (const json* types = f.opt_array("layer_types")) {
    if (static_cast<std::int64_t>(types->size()) != cfg.num_hidden_layers) {
      f.bad("layer_types", "has " + std::to_string(types->size()) + " entries but num_hidden_layers is " +
                               std::to_string(cfg.num_hidden_layers));
    }
    for (std::size_t i = 0; i < types->size(); ++i) {
      std::string key = "layer_types[" + std::to_string(i) + "]";
      LayerType t = parse_layer_type(f, key, (*types)[i]);
      if (t == LayerType::LinearAttention && !hybrid) {
        f.bad(key, "is 'linear_attention', which " + cfg.model_type + " does not have");
      }
      cfg.layer_types.push_back(t);
    }
  } else if (hybrid) {
    std::int64_t interval = f.positive_or("full_attention_interval", 4);
    for (std::int64_t i = 0; i < cfg.num_hidden_layers; ++i) {
      cfg.layer_types.push_back((i + 1) % interval != 0 ? LayerType::LinearAttention : LayerType::FullAttention);
    }
  } else {
    cfg.layer_types.assign(static_cast<std::size_t>(cfg.num_hidden_layers), LayerType::FullAttention);
  }

  if (hybrid) {
    cfg.linear_conv_kernel_dim = f.req_positive("linear_conv_kernel_dim");
    cfg.linear_key_head_dim = f.req_positive("linear_key_head_dim");
    cfg.linear_value_head_dim = f.req_positive("linear_value_head_dim");
    cfg.linear_num_key_heads = f.req_positive("linear_num_key_heads");
    cfg.linear_num_value_heads = f.req_positive("linear_num_value_heads");
    if (cfg.linear_num_value_heads % cfg.linear_num_key_heads != 0) {
      f.bad("linear_num_value_heads", "(" + std::to_string(cfg.linear_num_value_heads) +
                                          ") must be a multiple of linear_num_key_heads (" +
                                          std::to_string(cfg.linear_num_key_heads) + ")");
    }
  }

  // Special tokens: the text config's, else the top level's.
  auto token_fields = [&](const std::string& key) -> std::pair<const Fields*, const json*> {
    if (const json* v = f.get(key)) return {&f, v};
    if (body != &doc) {
      if (const json* v = top.get(key)) return {&top, v};
    }
    return {nullptr, nullptr};
  };
  if (auto [owner, v] = token_fields("bos_token_id"); v) {
    cfg.bos_token_id = owner->integer("bos_token_id", *v);
  }
  if (auto [owner, v] = token_fields("eos_token_id"); v) {
    if (v->is_array()) {
      for (std::size_t i = 0; i < v->size(); ++i) {
        cfg.eos_token_ids.push_back(owner->integer("eos_token_id[" + std::to_string(i) + "]", (*v)[i]));
      }
    } else if (v->is_number()) {
      cfg.eos_token_ids.push_back(owner->integer("eos_token_id", *v));
    } else {
      owner->wrong_type("eos_token_id", "an integer or a list of integers", *v);
    }
  }
  return cfg;
}

ModelConfig load_model_config(const std::filesystem::path& model_dir) {
  std::filesystem::path path = model_dir / "config.json";
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path.string(), ": cannot open (a model directory needs a config.json)");
  std::ostringstream text;
  text << in.rdbuf();
  json doc;
  try {
    doc = json::parse(text.str());
  } catch (const json::exception& e) {
    fail(path.string(), ": invalid JSON: ", e.what());
  }
  return parse_model_config(doc, path.string());
}

}  // namespace fp4serve
