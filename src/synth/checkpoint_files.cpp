#include "synth/checkpoint_files.h"

#include "synth/presets.h"
#include "util/error.h"

namespace fp4serve::synth {

using nlohmann::json;

WeightFormat weight_format_from_name(const std::string& name) {
  if (name == "nvfp4" || name == "modelopt") return WeightFormat::ModelOptNvfp4;
  if (name == "bf16") return WeightFormat::BF16;
  if (name == "compressed-tensors") return WeightFormat::CompressedTensorsNvfp4;
  fail("--format ", name, ": unknown; choose nvfp4 (ModelOpt), compressed-tensors or bf16");
}

const char* weight_format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::ModelOptNvfp4: return "nvfp4";
    case WeightFormat::CompressedTensorsNvfp4: return "compressed-tensors";
  }
  return "?";
}

QuantScope quant_scope_from_name(const std::string& name) {
  if (name == "all") return QuantScope::All;
  if (name == "experts") return QuantScope::Experts;
  fail("--quant-scope ", name, ": unknown; choose all or experts");
}

QuantScope default_quant_scope(Arch arch) {
  return arch == Arch::Qwen3Next || arch == Arch::Qwen3_5Moe ? QuantScope::Experts : QuantScope::All;
}

namespace {

bool is_hybrid(const ModelConfig& c) { return c.arch == Arch::Qwen3Next || c.arch == Arch::Qwen3_5Moe; }

std::vector<std::string> hybrid_excluded_modules(const ModelConfig& c, QuantScope scope, ExcludeForm form) {
  const std::string layers = c.weight_prefix + "layers.";
  std::vector<std::string> out = {"lm_head"};
  if (scope == QuantScope::All) {
    const std::vector<const char*> kept =
        c.arch == Arch::Qwen3Next
            ? std::vector<const char*>{"mlp.gate", "mlp.shared_expert_gate", "linear_attn.in_proj_ba", "linear_attn.conv1d"}
            : std::vector<const char*>{"mlp.gate", "mlp.shared_expert_gate", "linear_attn.in_proj_a",
                                       "linear_attn.in_proj_b", "linear_attn.conv1d"};
    for (const char* m : kept) out.push_back(layers + "*." + m);
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l)
      if (!c.is_moe_layer(l)) out.push_back(layers + std::to_string(l) + ".mlp.*_proj");
    return out;
  }
  out.push_back(layers + "*.mlp.gate");
  if (form == ExcludeForm::Wildcards) {
    // '*' inside the name crosses dots, so shared_expert* also covers shared_expert_gate.
    out.push_back(layers + "*.mlp.shared_expert*");
    out.push_back(layers + "*.linear_attn*");
    out.push_back(layers + "*.self_attn*");
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l)
      if (!c.is_moe_layer(l)) out.push_back(layers + std::to_string(l) + ".mlp*");
    return out;
  }
  out.push_back("*.mlp.shared_expert.*");
  for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = layers + std::to_string(l) + ".";
    if (c.is_moe_layer(l)) {
      // "x*" with a literal x covers x and x.<anything> but not x_gate: the gate needs its own entry.
      out.push_back(p + "mlp.shared_expert*");
      out.push_back(p + "mlp.shared_expert_gate");
    } else {
      out.push_back(p + "mlp*");
    }
    const bool linear = c.layer_types.at(static_cast<std::size_t>(l)) == LayerType::LinearAttention;
    out.push_back(p + (linear ? "linear_attn*" : "self_attn*"));
  }
  return out;
}

}  // namespace

std::vector<std::string> excluded_modules(const ModelConfig& c, QuantScope scope, ExcludeForm form) {
  if (is_hybrid(c)) return hybrid_excluded_modules(c, scope, form);
  std::vector<std::string> out = {"lm_head"};
  if (c.is_moe()) out.push_back(c.weight_prefix + "layers.*.mlp.gate");
  if (scope == QuantScope::Experts) {
    out.push_back(c.weight_prefix + "layers.*.self_attn*");
    if (!c.is_moe()) out.push_back(c.weight_prefix + "layers.*.mlp.*_proj");
    // Dense layers of an MoE model, one by one: "layers.*.mlp.*_proj" would match the experts too.
    for (std::int64_t l = 0; c.is_moe() && l < c.num_hidden_layers; ++l)
      if (!c.is_moe_layer(l)) out.push_back(c.weight_prefix + "layers." + std::to_string(l) + ".mlp.*_proj");
  }
  return out;
}

namespace {

const char* architecture_class(Arch arch) {
  switch (arch) {
    case Arch::Qwen3: return "Qwen3ForCausalLM";
    case Arch::Qwen3Moe: return "Qwen3MoeForCausalLM";
    case Arch::Qwen3Next: return "Qwen3NextForCausalLM";
    case Arch::Qwen3_5Moe: return "Qwen3_5MoeForConditionalGeneration";
  }
  return "?";
}

json nvfp4_args(bool with_activations_dynamic) {
  return json{{"num_bits", 4}, {"type", "float"}, {"group_size", 16}, {"dynamic", with_activations_dynamic}};
}

// compressed-tensors' own form (llm-compressor's NVFP4 preset).
json compressed_tensors_quantization_config(const ModelConfig& c, QuantScope scope) {
  json weights = {{"num_bits", 4},      {"type", "float"},     {"strategy", "tensor_group"},
                  {"group_size", 16},   {"symmetric", true},   {"dynamic", false},
                  {"observer", "minmax"}, {"scale_dtype", "torch.float8_e4m3fn"}};
  json acts = {{"num_bits", 4},     {"type", "float"},   {"strategy", "tensor_group"},
               {"group_size", 16},  {"symmetric", true}, {"dynamic", "local"},
               {"observer", "static_minmax"}};
  json ignore = json::array();
  for (const auto& m : excluded_modules(c, scope, ExcludeForm::Wildcards)) {
    // compressed-tensors spells wildcards as anchored regexes.
    std::string re;
    for (char ch : m) {
      if (ch == '*') re += ".*";
      else if (ch == '.') re += "\\.";
      else re += ch;
    }
    ignore.push_back(m.find('*') == std::string::npos ? m : "re:" + re + "$");
  }
  return json{{"quant_method", "compressed-tensors"},
              {"format", "nvfp4-pack-quantized"},
              {"quantization_status", "compressed"},
              {"config_groups",
               {{"group_0",
                 {{"format", "nvfp4-pack-quantized"},
                  {"targets", {"Linear"}},
                  {"weights", weights},
                  {"input_activations", acts}}}}},
              {"ignore", ignore},
              {"kv_cache_scheme", nullptr}};
}

// ModelOpt's flat config.json form (convert_hf_quant_config_format).
json modelopt_quantization_config(const ModelConfig& c, QuantScope scope) {
  return json{{"quant_method", "modelopt"},
              {"quant_algo", "NVFP4"},
              {"producer", {{"name", "modelopt"}, {"version", "fp4serve-synth"}}},
              {"config_groups",
               {{"group_0",
                 {{"input_activations", nvfp4_args(false)}, {"weights", nvfp4_args(false)}, {"targets", {"Linear"}}}}}},
              {"ignore", excluded_modules(c, scope)}};
}

// rope_parameters.mrope_section: the rotary pairs split over Qwen3.5's three position streams
// (t, h, w) as the release splits its 32 ([11, 11, 10]). Text-only input feeds all three the same
// positions, so the split changes nothing, but transformers needs it to sum to rotary_dim / 2.
json mrope_section(const ModelConfig& c) {
  const std::int64_t pairs = c.rotary_dim() / 2;
  return json::array({(pairs + 2) / 3, (pairs + 1) / 3, pairs / 3});
}

// The fields of the language model's config, as transformers' *Config classes name them.
json text_config_fields(const ModelConfig& c) {
  const bool hybrid = is_hybrid(c);
  json j = {
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"hidden_act", "silu"},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", c.rms_norm_eps},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"attention_bias", c.attention_bias},
      {"attention_dropout", 0.0},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"bos_token_id", c.bos_token_id},
      {"eos_token_id", c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids)},
  };
  if (c.intermediate_size > 0) j["intermediate_size"] = c.intermediate_size;
  if (c.arch == Arch::Qwen3_5Moe) {
    // transformers v5 form: rope settings live in rope_parameters; layer_types is explicit.
    j["rope_parameters"] = {{"rope_type", "default"},
                            {"rope_theta", c.rope_theta},
                            {"partial_rotary_factor", c.partial_rotary_factor},
                            {"mrope_section", mrope_section(c)},
                            {"mrope_interleaved", true}};
    j["partial_rotary_factor"] = c.partial_rotary_factor;
    j["dtype"] = "bfloat16";
    j["mamba_ssm_dtype"] = "float32";
    j["mtp_num_hidden_layers"] = 0;  // synth writes no multi-token-prediction weights
  } else {
    j["rope_theta"] = c.rope_theta;
    j["rope_scaling"] = nullptr;
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["torch_dtype"] = "bfloat16";
    if (hybrid) j["partial_rotary_factor"] = c.partial_rotary_factor;
  }
  if (c.is_moe()) {
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["output_router_logits"] = false;
    j["router_aux_loss_coef"] = 0.001;
    if (c.arch != Arch::Qwen3_5Moe) {  // Qwen3.5 always renormalises and has no dense layers
      j["norm_topk_prob"] = c.norm_topk_prob;
      j["decoder_sparse_step"] = c.decoder_sparse_step;
      j["mlp_only_layers"] = c.mlp_only_layers;
    }
  }
  if (hybrid) {
    j["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
    j["attn_output_gate"] = c.attn_output_gate;
    j["linear_conv_kernel_dim"] = c.linear_conv_kernel_dim;
    j["linear_key_head_dim"] = c.linear_key_head_dim;
    j["linear_value_head_dim"] = c.linear_value_head_dim;
    j["linear_num_key_heads"] = c.linear_num_key_heads;
    j["linear_num_value_heads"] = c.linear_num_value_heads;
    const std::int64_t interval = full_attention_interval(c);
    if (interval > 0) j["full_attention_interval"] = interval;
    // Qwen3.5 releases list the pattern; Qwen3-Next's derive it from the interval, and need the
    // list only when the pattern is not periodic.
    if (c.arch == Arch::Qwen3_5Moe || interval == 0) {
      json types = json::array();
      for (LayerType t : c.layer_types) types.push_back(t == LayerType::FullAttention ? "full_attention" : "linear_attention");
      j["layer_types"] = types;
    }
  }
  return j;
}

}  // namespace

json hf_quant_config_json(const ModelConfig& c, QuantScope scope) {
  return json{{"producer", {{"name", "modelopt"}, {"version", "fp4serve-synth"}}},
              {"quantization",
               {{"quant_algo", "NVFP4"},
                {"kv_cache_quant_algo", nullptr},
                {"group_size", 16},
                {"exclude_modules", excluded_modules(c, scope)}}}};
}

json config_json(const ModelConfig& c, WeightFormat format, QuantScope scope) {
  json text = text_config_fields(c);
  json j;
  if (c.arch == Arch::Qwen3_5Moe) {
    // Qwen3_5MoeConfig: the language model's fields live under text_config (Qwen3_5MoeTextConfig).
    text["model_type"] = "qwen3_5_moe_text";
    j = {{"architectures", {architecture_class(c.arch)}},
         {"model_type", c.model_type},
         {"tie_word_embeddings", c.tie_word_embeddings},
         {"text_config", text}};
  } else {
    j = text;
    j["architectures"] = {architecture_class(c.arch)};
    j["model_type"] = c.model_type;
  }
  if (format == WeightFormat::ModelOptNvfp4) j["quantization_config"] = modelopt_quantization_config(c, scope);
  if (format == WeightFormat::CompressedTensorsNvfp4)
    j["quantization_config"] = compressed_tensors_quantization_config(c, scope);
  return j;
}

json generation_config_json(const ModelConfig& c) {
  return json{{"bos_token_id", c.bos_token_id},
              {"eos_token_id", c.eos_token_ids},
              {"do_sample", true},
              {"temperature", 0.6},
              {"top_p", 0.95},
              {"top_k", 20}};
}

}  // namespace fp4serve::synth
