#include "model/tensor_roles.h"

#include <array>
#include <cctype>

namespace fp4serve {

std::string_view tensor_role_name(TensorRole role) {
  switch (role) {
    case TensorRole::Embedding: return "embedding";
    case TensorRole::LmHead: return "lm_head";
    case TensorRole::Norm: return "norm";
    case TensorRole::Attention: return "attention";
    case TensorRole::LinearAttention: return "linear_attention";
    case TensorRole::Router: return "router";
    case TensorRole::RoutedExpert: return "routed_expert";
    case TensorRole::SharedExpert: return "shared_expert";
    case TensorRole::DenseMlp: return "dense_mlp";
    case TensorRole::Mtp: return "mtp";
    case TensorRole::Vision: return "vision";
    case TensorRole::Other: return "other";
  }
  return "other";
}

namespace {

bool contains(std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; }

// Reads the integer that follows `marker` ("layers." or "experts."), or -1.
std::int64_t index_after(std::string_view name, std::string_view marker) {
  auto pos = name.find(marker);
  if (pos == std::string_view::npos) return -1;
  pos += marker.size();
  std::int64_t value = 0;
  bool any = false;
  while (pos < name.size() && std::isdigit(static_cast<unsigned char>(name[pos]))) {
    value = value * 10 + (name[pos] - '0');
    any = true;
    ++pos;
  }
  return any ? value : -1;
}

// Replaces every ".<digits>." path component with ".*.".
std::string group_of(std::string_view name) {
  std::string out;
  out.reserve(name.size());
  std::size_t i = 0;
  while (i < name.size()) {
    if (name[i] == '.' && i + 1 < name.size() && std::isdigit(static_cast<unsigned char>(name[i + 1]))) {
      std::size_t j = i + 1;
      while (j < name.size() && std::isdigit(static_cast<unsigned char>(name[j]))) ++j;
      if (j == name.size() || name[j] == '.') {
        out += ".*";
        i = j;
        continue;
      }
    }
    out += name[i++];
  }
  return out;
}

TensorRole role_of(std::string_view name) {
  if (name.starts_with("mtp.") || contains(name, ".mtp.")) return TensorRole::Mtp;
  if (contains(name, "visual.") || contains(name, "vision_tower") || contains(name, "vision_model"))
    return TensorRole::Vision;
  if (contains(name, "embed_tokens")) return TensorRole::Embedding;
  if (name.starts_with("lm_head")) return TensorRole::LmHead;
  if (contains(name, "layernorm") || contains(name, "_norm.") || name.ends_with("norm.weight"))
    return contains(name, "linear_attn.") ? TensorRole::LinearAttention : TensorRole::Norm;
  if (contains(name, ".self_attn.")) return TensorRole::Attention;
  if (contains(name, ".linear_attn.")) return TensorRole::LinearAttention;
  if (contains(name, ".mlp.shared_expert")) return TensorRole::SharedExpert;
  if (contains(name, ".mlp.experts.")) return TensorRole::RoutedExpert;
  if (contains(name, ".mlp.gate.") || name.ends_with(".mlp.gate")) return TensorRole::Router;
  if (contains(name, ".mlp.")) return TensorRole::DenseMlp;
  return TensorRole::Other;
}

}  // namespace

TensorRoleInfo classify_tensor(std::string_view name) {
  TensorRoleInfo info;
  info.role = role_of(name);
  info.layer = index_after(name, "layers.");
  if (info.role == TensorRole::RoutedExpert) info.expert = index_after(name, "experts.");
  info.group = group_of(name);
  return info;
}

bool is_quant_metadata_tensor(std::string_view name) {
  static constexpr std::array<std::string_view, 9> kSuffixes = {
      ".weight_scale",  ".weight_scale_2",    ".weight_global_scale", ".input_scale", ".input_global_scale",
      ".k_scale",       ".v_scale",           ".weight_zero_point",   ".pre_quant_scale"};
  for (auto suffix : kSuffixes)
    if (name.ends_with(suffix)) return true;
  // Fused-expert exports name scales "<proj>_weight_scale", "<proj>_input_scale", ...
  return name.ends_with("_weight_scale") || name.ends_with("_weight_scale_2") || name.ends_with("_input_scale");
}

}  // namespace fp4serve
