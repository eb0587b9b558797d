#include "synth/checkpoint_files.h"

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

std::vector<std::string> excluded_modules(const ModelConfig& c, QuantScope scope) {
  std::vector<std::string> out = {"lm_head"};
  if (c.is_moe()) out.push_back(c.weight_prefix + "layers.*.mlp.gate");
  if (scope == QuantScope::Experts) {
    out.push_back(c.weight_prefix + "layers.*.self_attn*");
    if (!c.mlp_only_layers.empty() || !c.is_moe()) out.push_back(c.weight_prefix + "layers.*.mlp.*_proj");
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
  for (const auto& m : excluded_modules(c, scope)) {
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
  json j = {
      {"architectures", {architecture_class(c.arch)}},
      {"model_type", c.model_type},
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"hidden_act", "silu"},
      {"max_position_embeddings", c.max_position_embeddings},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_theta", c.rope_theta},
      {"rope_scaling", nullptr},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"attention_bias", c.attention_bias},
      {"attention_dropout", 0.0},
      {"use_sliding_window", false},
      {"sliding_window", nullptr},
      {"initializer_range", 0.02},
      {"use_cache", true},
      {"bos_token_id", c.bos_token_id},
      {"eos_token_id", c.eos_token_ids.size() == 1 ? json(c.eos_token_ids[0]) : json(c.eos_token_ids)},
      {"torch_dtype", "bfloat16"},
  };
  if (c.is_moe()) {
    j["num_experts"] = c.num_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] = c.moe_intermediate_size;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["decoder_sparse_step"] = c.decoder_sparse_step;
    j["mlp_only_layers"] = c.mlp_only_layers;
    j["output_router_logits"] = false;
    j["router_aux_loss_coef"] = 0.001;
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
