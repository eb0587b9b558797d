#include "model/checkpoint_summary.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <sstream>

#include "formats/checkpoint.h"
#include "formats/quant_config.h"
#include "model/tensor_roles.h"
#include "util/progress_bar.h"

namespace fp4serve {

namespace {

std::string producer_name(QuantProducer p) {
  switch (p) {
    case QuantProducer::ModelOpt: return "modelopt";
    case QuantProducer::CompressedTensors: return "compressed-tensors";
    case QuantProducer::None: return "none";
  }
  return "none";
}

std::string module_of(const std::string& tensor) {
  for (const char* suffix : {".weight_packed", ".weight"})
    if (tensor.ends_with(suffix)) return tensor.substr(0, tensor.size() - std::string(suffix).size());
  return tensor;
}

// Fraction of a tensor read per token, and whether it counts as an active parameter.
struct Usage {
  double fraction = 1.0;
  bool active = true;
};

Usage usage_of(const TensorRoleInfo& role, const TensorInfo& t, const ModelConfig& c) {
  switch (role.role) {
    case TensorRole::Mtp:
    case TensorRole::Vision: return {0.0, false};
    case TensorRole::RoutedExpert:
      return {static_cast<double>(c.num_experts_per_tok) / static_cast<double>(std::max<std::int64_t>(1, c.num_experts)),
              true};
    case TensorRole::Embedding:
      // One row per token, unless the same matrix is the (tied) lm_head, which reads it all.
      if (c.tie_word_embeddings || t.shape.empty()) return {1.0, true};
      return {1.0 / static_cast<double>(t.shape[0]), true};
    default: return {1.0, true};
  }
}

std::string fmt_count(std::int64_t n) {
  char buf[32];
  if (n >= 1'000'000'000) std::snprintf(buf, sizeof buf, "%.2f B", static_cast<double>(n) / 1e9);
  else if (n >= 1'000'000) std::snprintf(buf, sizeof buf, "%.2f M", static_cast<double>(n) / 1e6);
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return buf;
}

}  // namespace

std::string layer_pattern(const ModelConfig& c) {
  const std::int64_t full = std::count(c.layer_types.begin(), c.layer_types.end(), LayerType::FullAttention);
  const std::int64_t linear = static_cast<std::int64_t>(c.layer_types.size()) - full;
  if (linear == 0) return std::to_string(full) + " full_attention";
  return std::to_string(linear) + " linear_attention + " + std::to_string(full) + " full_attention";
}

CheckpointSummary summarize_checkpoint(const std::filesystem::path& dir) {
  CheckpointSummary s;
  s.dir = dir;
  s.config = load_model_config(dir);
  const ModelConfig& c = s.config;
  const Checkpoint ckpt = Checkpoint::open(dir);
  const QuantConfig qc = load_quant_config(dir);
  // Headers only: scale values live in the data section, one page per module.
  const ResolvedQuantization rq = resolve_quantization(ckpt, qc, ScaleValues::Skip);
  s.quant_producer = producer_name(qc.producer);
  s.quant_algo = qc.quant_algo;
  s.excluded = qc.ignore;
  s.warnings = ckpt.warnings();
  s.warnings.insert(s.warnings.end(), rq.warnings.begin(), rq.warnings.end());
  s.files = ckpt.files().size();
  s.tensors = ckpt.tensors().size();

  std::map<std::pair<std::string, std::string>, ModuleGroup> groups;
  for (const auto& [name, ref] : ckpt.tensors()) {
    const TensorInfo& t = *ref.info;
    s.total_bytes += t.nbytes();
    s.bytes_by_dtype[std::string(dtype_name(t.dtype))] += t.nbytes();
    const TensorRoleInfo role = classify_tensor(name);
    const Usage use = usage_of(role, t, c);
    const auto read = static_cast<std::uint64_t>(static_cast<double>(t.nbytes()) * use.fraction);
    s.weight_bytes_per_token += read;
    if (role.role == TensorRole::RoutedExpert) s.routed_expert_bytes_per_token += read;
    if (use.active && role.role != TensorRole::Mtp && role.role != TensorRole::Vision)
      s.resident_weight_bytes += t.nbytes();

    // Attribute scales to their module's group; count parameters on weights only.
    const LinearModule* module = rq.find(module_of(name));
    std::string scheme = std::string(dtype_name(t.dtype));
    std::int64_t params = 0;
    if (!is_quant_metadata_tensor(name)) {
      params = t.numel();
      if (module && module->scheme.kind == SchemeKind::NVFP4) params = module->out_features * module->in_features;
    }
    if (module) {
      // Shown as formats are usually written: NVFP4, FP8, or the dense dtype (BF16, F32, ...).
      scheme = std::string(scheme_kind_name(module->scheme.kind));
      std::transform(scheme.begin(), scheme.end(), scheme.begin(), [](unsigned char ch) { return std::toupper(ch); });
      if (module->scheme.kind == SchemeKind::Dense) scheme = std::string(dtype_name(module->scheme.storage));
      if (module->scheme.activations_quantized) s.activation_scales = true;
    }
    s.params_total += params;
    if (use.active) {
      const double active_fraction = role.role == TensorRole::Embedding ? 1.0 : use.fraction;
      s.params_active += static_cast<std::int64_t>(static_cast<double>(params) * active_fraction + 0.5);
    }
    if (is_quant_metadata_tensor(name) && !module) continue;  // stray scale: resolve already checked
    std::string group = role.group;
    for (const char* suffix : {".weight_packed", ".weight_scale_2", ".weight_global_scale", ".weight_scale",
                               ".input_global_scale", ".input_scale", ".weight"})
      if (group.ends_with(suffix)) {
        group.resize(group.size() - std::string(suffix).size());
        break;
      }
    ModuleGroup& g = groups[{group, scheme}];
    g.group = group;
    g.scheme = scheme;
    g.role = std::string(tensor_role_name(role.role));
    if (!is_quant_metadata_tensor(name)) ++g.modules;
    g.params += params;
    g.bytes += t.nbytes();
  }
  for (auto& [key, g] : groups) s.groups.push_back(std::move(g));
  std::sort(s.groups.begin(), s.groups.end(), [](const ModuleGroup& a, const ModuleGroup& b) { return a.bytes > b.bytes; });

  std::int64_t full_layers = 0, linear_layers = 0;
  for (LayerType lt : c.layer_types) (lt == LayerType::FullAttention ? full_layers : linear_layers)++;
  s.kv_bytes_per_token = static_cast<std::uint64_t>(full_layers * 2 * c.num_key_value_heads * c.head_dim * 2);
  const std::int64_t conv_channels =
      2 * c.linear_num_key_heads * c.linear_key_head_dim + c.linear_num_value_heads * c.linear_value_head_dim;
  s.conv_state_bytes = static_cast<std::uint64_t>(linear_layers * conv_channels *
                                                  std::max<std::int64_t>(0, c.linear_conv_kernel_dim - 1) * 4);
  s.recurrent_state_bytes = static_cast<std::uint64_t>(
      linear_layers * c.linear_num_value_heads * c.linear_key_head_dim * c.linear_value_head_dim * 4);
  if (qc.producer == QuantProducer::None) s.warnings.push_back("no quantization config: every weight is served as stored");
  return s;
}

nlohmann::json summary_to_json(const CheckpointSummary& s) {
  using nlohmann::json;
  const ModelConfig& c = s.config;
  json groups = json::array();
  for (const auto& g : s.groups)
    groups.push_back({{"group", g.group}, {"role", g.role}, {"scheme", g.scheme}, {"modules", g.modules},
                      {"params", g.params}, {"bytes", g.bytes}});
  std::int64_t full_layers = std::count(c.layer_types.begin(), c.layer_types.end(), LayerType::FullAttention);
  json arch = {{"model_type", c.model_type},
               {"layers", c.num_hidden_layers},
               {"layer_pattern", layer_pattern(c)},
               {"full_attention_layers", full_layers},
               {"linear_attention_layers", c.num_hidden_layers - full_layers},
               {"hidden_size", c.hidden_size},
               {"num_attention_heads", c.num_attention_heads},
               {"num_key_value_heads", c.num_key_value_heads},
               {"head_dim", c.head_dim},
               {"rotary_dim", c.rotary_dim()},
               {"attn_output_gate", c.attn_output_gate},
               {"vocab_size", c.vocab_size},
               {"num_experts", c.num_experts},
               {"num_experts_per_tok", c.num_experts_per_tok},
               {"moe_intermediate_size", c.moe_intermediate_size},
               {"shared_expert_intermediate_size", c.shared_expert_intermediate_size},
               {"tie_word_embeddings", c.tie_word_embeddings},
               {"max_position_embeddings", c.max_position_embeddings}};
  if (c.num_hidden_layers > full_layers) {
    arch["linear_attention"] = {{"num_key_heads", c.linear_num_key_heads},
                                {"num_value_heads", c.linear_num_value_heads},
                                {"key_head_dim", c.linear_key_head_dim},
                                {"value_head_dim", c.linear_value_head_dim},
                                {"conv_kernel_dim", c.linear_conv_kernel_dim}};
  }
  return json{
      {"path", s.dir.string()},
      {"architecture", arch},
      {"quantization",
       {{"producer", s.quant_producer}, {"quant_algo", s.quant_algo}, {"activation_scales", s.activation_scales},
        {"excluded_modules", s.excluded}}},
      {"parameters", {{"total", s.params_total}, {"active_per_token", s.params_active}}},
      {"files", s.files},
      {"tensors", s.tensors},
      {"bytes", {{"total", s.total_bytes}, {"by_dtype", s.bytes_by_dtype}}},
      {"module_groups", groups},
      {"memory",
       {{"resident_weight_bytes", s.resident_weight_bytes},
        {"kv_cache_bytes_per_token", s.kv_bytes_per_token},
        {"kv_cache_bytes_at_max_context", s.kv_bytes_per_token * static_cast<std::uint64_t>(c.max_position_embeddings)},
        {"linear_attention_state_bytes_per_sequence", s.linear_state_bytes()},
        {"conv_state_bytes_per_sequence", s.conv_state_bytes},
        {"recurrent_state_bytes_per_sequence", s.recurrent_state_bytes}}},
      {"decode",
       {{"weight_bytes_per_token", s.weight_bytes_per_token},
        {"routed_expert_bytes_per_token", s.routed_expert_bytes_per_token},
        {"kv_bytes_per_context_token", s.kv_bytes_per_token}}},
      {"warnings", s.warnings},
  };
}

std::string summary_to_text(const CheckpointSummary& s) {
  const ModelConfig& c = s.config;
  std::ostringstream os;
  os << "checkpoint     " << s.dir.string() << "\n";
  const std::int64_t linear = std::count(c.layer_types.begin(), c.layer_types.end(), LayerType::LinearAttention);
  os << "architecture   " << c.model_type << ": " << c.num_hidden_layers << " layers";
  if (linear > 0) os << " (" << layer_pattern(c) << ")";
  os << ", hidden " << c.hidden_size << ", " << c.num_attention_heads << " q / " << c.num_key_value_heads
     << " kv heads x " << c.head_dim;
  if (c.attn_output_gate || c.rotary_dim() != c.head_dim) {
    os << " (";
    if (c.attn_output_gate) os << "output-gated, ";
    os << "rotary " << c.rotary_dim() << " of " << c.head_dim << ")";
  }
  os << ", vocab " << c.vocab_size << (c.tie_word_embeddings ? ", tied embeddings" : "") << "\n";
  if (linear > 0)
    os << "linear attn    Gated DeltaNet: " << c.linear_num_key_heads << " qk heads x " << c.linear_key_head_dim << ", "
       << c.linear_num_value_heads << " v heads x " << c.linear_value_head_dim << ", conv kernel "
       << c.linear_conv_kernel_dim << "\n";
  if (c.is_moe())
    os << "experts        " << c.num_experts << " routed, top " << c.num_experts_per_tok << ", intermediate "
       << c.moe_intermediate_size
       << (c.shared_expert_intermediate_size ? ", shared expert " + std::to_string(c.shared_expert_intermediate_size) : "")
       << "\n";
  os << "quantization   " << s.quant_producer;
  if (!s.quant_algo.empty()) os << " " << s.quant_algo;
  if (s.quant_producer != "none") os << (s.activation_scales ? " (input scales present: W4A4-capable)" : " (weight-only: W4A16)");
  os << "\n";
  os << "parameters     " << fmt_count(s.params_total) << " total, " << fmt_count(s.params_active) << " active per token\n";
  os << "files          " << s.files << " safetensors file(s), " << s.tensors << " tensors, " << format_bytes(static_cast<double>(s.total_bytes)) << "\n";
  os << "bytes by dtype ";
  bool first = true;
  for (const auto& [dtype, bytes] : s.bytes_by_dtype) {
    os << (first ? "" : ", ") << dtype << " " << format_bytes(static_cast<double>(bytes));
    first = false;
  }
  os << "\n\nmodule groups (largest first)\n";
  char line[512];
  std::snprintf(line, sizeof line, "  %-8s %8s %12s %12s  %s\n", "scheme", "modules", "params", "bytes", "group");
  os << line;
  for (const auto& g : s.groups) {
    std::snprintf(line, sizeof line, "  %-8s %8lld %12s %12s  %s\n", g.scheme.c_str(), static_cast<long long>(g.modules),
                  fmt_count(g.params).c_str(), format_bytes(static_cast<double>(g.bytes)).c_str(), g.group.c_str());
    os << line;
  }
  if (!s.excluded.empty()) {
    // Releases list per-layer entries (184 for Qwen3.5-397B); show each shape once with its count.
    os << "\nexcluded from quantization (config)\n";
    std::vector<std::pair<std::string, std::int64_t>> shapes;
    for (const auto& e : s.excluded) {
      const std::string key = classify_tensor(e).group;
      auto it = std::find_if(shapes.begin(), shapes.end(), [&](const auto& p) { return p.first == key; });
      if (it == shapes.end()) shapes.emplace_back(key, 1);
      else ++it->second;
    }
    for (const auto& [pattern, count] : shapes) {
      os << "  " << pattern;
      if (count > 1) os << "   (" << count << " entries, one per layer)";
      os << "\n";
    }
  }
  os << "\nmemory         weights resident " << format_bytes(static_cast<double>(s.resident_weight_bytes))
     << "; KV cache " << format_bytes(static_cast<double>(s.kv_bytes_per_token)) << " per token ("
     << format_bytes(static_cast<double>(s.kv_bytes_per_token) * static_cast<double>(c.max_position_embeddings))
     << " at " << c.max_position_embeddings << " tokens)";
  if (linear > 0) {
    os << "\nstate          per sequence: " << format_bytes(static_cast<double>(s.linear_state_bytes()))
       << " fixed for " << linear << " linear-attention layer" << (linear == 1 ? "" : "s") << " (conv "
       << format_bytes(static_cast<double>(s.conv_state_bytes)) << " + recurrent "
       << format_bytes(static_cast<double>(s.recurrent_state_bytes)) << ", fp32), plus "
       << format_bytes(static_cast<double>(s.kv_bytes_per_token)) << " of KV cache per token for "
       << c.num_hidden_layers - linear << " full-attention layer" << (c.num_hidden_layers - linear == 1 ? "" : "s");
  }
  os << "\ndecode reads   " << format_bytes(static_cast<double>(s.weight_bytes_per_token))
     << " of weights per token";
  if (s.routed_expert_bytes_per_token > 0)
    os << " (" << format_bytes(static_cast<double>(s.routed_expert_bytes_per_token)) << " of them routed experts)";
  os << ", plus " << format_bytes(static_cast<double>(s.kv_bytes_per_token)) << " of KV cache per token of context\n";
  if (!s.warnings.empty()) {
    os << "\nwarnings\n";
    for (const auto& w : s.warnings) os << "  - " << w << "\n";
  }
  return os.str();
}

}  // namespace fp4serve
