#include "formats/quant_scheme.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>
#include <set>
#include <sstream>

#include "numerics/scalar_formats.h"
#include "util/error.h"

namespace fp4serve {

namespace {

// Parameter names a linear module can carry (the part after the module path's last '.').
const std::set<std::string, std::less<>>& linear_params() {
  static const std::set<std::string, std::less<>> params = {
      "weight",      "weight_packed",      "weight_scale", "weight_scale_2", "weight_global_scale",
      "input_scale", "input_global_scale", "k_scale",      "v_scale",        "pre_quant_scale",
      "bias"};
  return params;
}
// Scale tensors that only make sense next to a weight.
constexpr std::string_view kScaleParams[] = {"weight_scale", "weight_scale_2",     "weight_global_scale",
                                             "input_scale",  "input_global_scale", "pre_quant_scale"};

// Modules ModelOpt never quantizes (its default-disabled quantizers) or that are not nn.Linear:
// a float weight here is fine even when the config's blanket declaration says otherwise.
bool conventionally_unquantized(std::string_view module) {
  static constexpr std::string_view kPatterns[] = {"*embed_tokens*",
                                                   "*lm_head*",
                                                   "*router*",
                                                   "*mlp.gate",
                                                   "*shared_expert_gate*",
                                                   "*block_sparse_moe.gate*",
                                                   "*linear_attn.conv1d*",
                                                   "*linear_attn.in_proj_a*",
                                                   "*linear_attn.in_proj_b*",
                                                   "*output_layer*",
                                                   "mtp.*",
                                                   "*.mtp.*",
                                                   "*visual*",
                                                   "*vision_tower*",
                                                   "*vision_model*",
                                                   "*multi_modal_projector*",
                                                   "*embed_vision*"};
  for (std::string_view p : kPatterns) {
    if (module_pattern_matches(p, module)) return true;
  }
  return false;
}

// Embedding tables are nn.Embedding, never covered by a declaration for Linear layers.
bool is_embedding(std::string_view module) {
  return module_pattern_matches("*embed_tokens", module) || module_pattern_matches("*embed_vision*", module);
}

bool is_scalar_shape(const std::vector<std::int64_t>& shape) {
  return shape.empty() || (shape.size() == 1 && shape[0] == 1);
}

std::string decl_name(const ModuleQuantDecl& d) {
  switch (d.weight) {
    case WeightFormat::NVFP4: return d.activations_quantized ? "NVFP4 (W4A4)" : "NVFP4 (W4A16)";
    case WeightFormat::FP8: return "FP8";
    case WeightFormat::Unquantized: break;
  }
  return "unquantized";
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

class Resolver {
 public:
  Resolver(const Checkpoint& ckpt, const QuantConfig& config, ScaleValues scale_values)
      : ckpt_(ckpt), config_(config), read_values_(scale_values == ScaleValues::Read) {}

  ResolvedQuantization run();

 private:
  using Params = std::map<std::string, const TensorRef*, std::less<>>;

  [[noreturn]] void bad(const std::string& tensor, const std::string& what) const {
    fail(ckpt_.dir().string(), ": tensor '", tensor, "': ", what);
  }
  std::string config_name() const { return config_.source.empty() ? "the quantization config" : config_.source; }

  // Checks a per-tensor scale ([] or [1], F32 or BF16) and returns its value.
  float scalar(const std::string& name, const TensorRef& t, bool* stored_bf16 = nullptr) const;
  void resolve_module(const std::string& module, const Params& params);
  void resolve_fused(const std::string& module, const std::string& param, const TensorRef& t);
  void dense_module(const std::string& module, const std::string& wname, const TensorRef& w, const Params& params,
                    std::int64_t fused_experts);
  void nvfp4_module(const std::string& module, const std::string& wname, const TensorRef& w, const Params& params,
                    bool packed_name);
  void fp8_module(const std::string& module, const std::string& wname, const TensorRef& w, const Params& params);
  void add_warnings();

  const Checkpoint& ckpt_;
  const QuantConfig& config_;
  bool read_values_;
  ResolvedQuantization out_;
  std::vector<ModuleQuantDecl> decls_;     // parallel to out_.modules
  std::vector<std::string> exempt_dense_;  // declared quantized but conventionally unquantized
  std::vector<std::string> kv_scale_modules_;
};

float Resolver::scalar(const std::string& name, const TensorRef& t, bool* stored_bf16) const {
  const TensorInfo& info = *t.info;
  if (!is_scalar_shape(info.shape)) {
    bad(name, "must be a per-tensor scalar (shape [] or [1]), got shape " + shape_to_string(info.shape));
  }
  if (info.dtype == DType::BF16 && stored_bf16) *stored_bf16 = true;
  if (!read_values_) {
    if (info.dtype != DType::F32 && info.dtype != DType::BF16)
      bad(name, "must be F32 or BF16, got " + std::string(dtype_name(info.dtype)));
    return 1.0f;
  }
  std::span<const std::uint8_t> b = t.bytes();
  float value = 0.0f;
  if (info.dtype == DType::F32) {
    if (b.size() < 4) bad(name, "holds " + std::to_string(b.size()) + " bytes, expected 4");
    std::uint32_t u = static_cast<std::uint32_t>(b[0]) | static_cast<std::uint32_t>(b[1]) << 8 |
                      static_cast<std::uint32_t>(b[2]) << 16 | static_cast<std::uint32_t>(b[3]) << 24;
    value = std::bit_cast<float>(u);
  } else if (info.dtype == DType::BF16) {
    if (b.size() < 2) bad(name, "holds " + std::to_string(b.size()) + " bytes, expected 2");
    value = bf16_to_float(static_cast<std::uint16_t>(b[0] | b[1] << 8));
    if (stored_bf16) *stored_bf16 = true;
  } else {
    bad(name, "must be F32 or BF16, got " + std::string(dtype_name(info.dtype)));
  }
  if (!std::isfinite(value) || value <= 0.0f) {
    std::ostringstream os;
    os << "must be a finite positive scale, got " << value;
    bad(name, os.str());
  }
  return value;
}

void Resolver::resolve_module(const std::string& module, const Params& params) {
  auto param = [&](std::string_view p) -> const TensorRef* {
    auto it = params.find(p);
    return it == params.end() ? nullptr : it->second;
  };
  const TensorRef* w = param("weight");
  const TensorRef* wp = param("weight_packed");
  if (w && wp) bad(module + ".weight_packed", "is present next to " + module + ".weight; expected one of the two");
  if (!w && !wp) {
    for (std::string_view s : kScaleParams) {
      if (param(s)) {
        bad(module + "." + std::string(s), "is a scale tensor without a weight (neither " + module + ".weight nor " +
                                               module + ".weight_packed exists)");
      }
    }
    if (param("k_scale") || param("v_scale")) kv_scale_modules_.push_back(module);
    return;  // a lone bias or KV-cache scale
  }
  if (param("k_scale") || param("v_scale")) kv_scale_modules_.push_back(module);
  const TensorRef& weight = w ? *w : *wp;
  const std::string wname = module + (w ? ".weight" : ".weight_packed");
  const TensorInfo& info = *weight.info;
  if (info.shape.size() != 2) {
    for (std::string_view s : kScaleParams) {
      if (param(s)) {
        bad(module + "." + std::string(s), "is a scale for " + wname + ", which has shape " + shape_to_string(info.shape) +
                                               "; only 2-D linear weights can be quantized");
      }
    }
    if (info.dtype == DType::U8 || info.dtype == DType::F8_E4M3 || wp) {
      bad(wname, "is " + std::string(dtype_name(info.dtype)) + " with shape " + shape_to_string(info.shape) +
                     "; only 2-D quantized linear weights are supported");
    }
    // Fused experts spelled with a ".weight" suffix: "<...>.experts.gate_up_proj.weight" [E, 2I, H].
    if (info.shape.size() == 3 &&
        (ends_with(module, ".experts.gate_up_proj") || ends_with(module, ".experts.down_proj"))) {
      dense_module(module, wname, weight, params, info.shape[0]);
    }
    return;  // norms, conv1d, ...
  }
  if (const TensorRef* pq = param("pre_quant_scale")) {
    (void)pq;
    bad(module + ".pre_quant_scale", "is an AWQ pre-quantization scale (NVFP4_AWQ), which is not supported");
  }
  switch (info.dtype) {
    case DType::U8: nvfp4_module(module, wname, weight, params, wp != nullptr); return;
    case DType::F8_E4M3: fp8_module(module, wname, weight, params); return;
    case DType::BF16:
    case DType::F16:
    case DType::F32:
      if (wp) bad(wname, "is " + std::string(dtype_name(info.dtype)) + "; weight_packed must be U8 (packed FP4)");
      dense_module(module, wname, weight, params, 0);
      return;
    default:
      bad(wname, "has dtype " + std::string(dtype_name(info.dtype)) +
                     ", which is not a supported weight type (BF16/F16/F32, U8 NVFP4, F8_E4M3 FP8)");
  }
}

void Resolver::dense_module(const std::string& module, const std::string& wname, const TensorRef& w,
                            const Params& params, std::int64_t fused_experts) {
  for (std::string_view s : kScaleParams) {
    if (params.count(s)) {
      bad(module + "." + std::string(s), "is a quantization scale but " + wname + " is " +
                                             std::string(dtype_name(w.info->dtype)) + " (not quantized)");
    }
  }
  ModuleQuantDecl decl = config_.decl_for(module);
  if (decl.weight != WeightFormat::Unquantized) {
    if (is_embedding(module)) {
      decl = ModuleQuantDecl{};  // not a Linear: no "Linear" declaration covers it
    } else if (conventionally_unquantized(module)) {
      exempt_dense_.push_back(module);
      decl = ModuleQuantDecl{};
    } else {
      bad(wname, config_name() + " declares module '" + module + "' " + decl_name(decl) + " but the weight is " +
                     std::string(dtype_name(w.info->dtype)) +
                     " with no scale tensors; the module is not in the ignore/exclude list");
    }
  }
  const auto& shape = w.info->shape;
  LinearModule m;
  m.name = module;
  m.fused_experts = fused_experts;
  m.out_features = shape[shape.size() - 2];
  m.in_features = shape[shape.size() - 1];
  m.scheme.kind = SchemeKind::Dense;
  m.scheme.storage = w.info->dtype;
  m.scheme.weight = wname;
  out_.modules.push_back(std::move(m));
  decls_.push_back(decl);
}

void Resolver::nvfp4_module(const std::string& module, const std::string& wname, const TensorRef& w,
                            const Params& params, bool packed_name) {
  auto param = [&](std::string_view p) -> const TensorRef* {
    auto it = params.find(p);
    return it == params.end() ? nullptr : it->second;
  };
  const TensorRef* ws = param("weight_scale");
  if (config_.producer == QuantProducer::None) {
    bad(wname,
        "is U8 (packed FP4) but the checkpoint has no quantization config (no hf_quant_config.json and no "
        "quantization_config in config.json)");
  }
  ModuleQuantDecl decl = config_.decl_for(module);
  if (decl.weight == WeightFormat::Unquantized) {
    if (const std::string* pattern = config_.ignore_match(module)) {
      bad(wname, std::string("is U8 (packed NVFP4") + (ws ? ", with " + module + ".weight_scale" : "") +
                     ") but module '" + module + "' is excluded by pattern '" + *pattern + "' in " + config_name());
    }
  }
  if (decl.weight != WeightFormat::NVFP4) {
    bad(wname, "is U8 (packed NVFP4) but " + config_name() + " declares module '" + module + "' " + decl_name(decl));
  }
  const std::int64_t group = decl.group_size > 0 ? decl.group_size : 16;
  const auto& shape = w.info->shape;
  const std::int64_t out = shape[0];
  const std::int64_t in = shape[1] * 2;
  if (out <= 0 || in <= 0) bad(wname, "has an empty shape " + shape_to_string(shape));
  if (in % group != 0) {
    bad(wname, "has " + std::to_string(in) + " input features (shape " + shape_to_string(shape) +
                   " packed 2 per byte), not a multiple of the NVFP4 block size " + std::to_string(group));
  }
  const std::string ws_name = module + ".weight_scale";
  if (!ws) bad(ws_name, "is missing; " + wname + " is packed NVFP4 and needs its per-block F8_E4M3 scales");
  if (ws->info->dtype != DType::F8_E4M3) {
    std::string hint = ws->info->dtype == DType::U8 && ws->info->shape.size() == 1
                           ? " (a 1-D U8 scale is TRT-LLM's swizzled layout, which HF exports never contain)"
                           : "";
    bad(ws_name, "must be F8_E4M3, got " + std::string(dtype_name(ws->info->dtype)) + hint);
  }
  const std::vector<std::int64_t> want{out, in / group};
  if (ws->info->shape != want) {
    bad(ws_name, "has shape " + shape_to_string(ws->info->shape) + ", expected " + shape_to_string(want) + " for " + wname + " " +
                     shape_to_string(shape));
  }

  QuantScheme s;
  s.kind = SchemeKind::NVFP4;
  s.storage = DType::U8;
  s.weight = wname;
  s.block_scale = ws_name;
  const TensorRef* ws2 = param("weight_scale_2");
  const TensorRef* wgs = param("weight_global_scale");
  const TensorRef* is = param("input_scale");
  const TensorRef* igs = param("input_global_scale");
  if (!packed_name) {
    // ModelOpt: weight_scale_2 / input_scale are dequant multipliers.
    if (wgs) bad(module + ".weight_global_scale", "is a compressed-tensors name next to ModelOpt's " + wname);
    if (igs) bad(module + ".input_global_scale", "is a compressed-tensors name next to ModelOpt's " + wname);
    if (!ws2) bad(module + ".weight_scale_2", "is missing; " + wname + " is packed NVFP4 and needs its global scale");
    s.weight_scale_2 = scalar(module + ".weight_scale_2", *ws2, &s.scale_stored_bf16);
    if (is) {
      s.input_scale = scalar(module + ".input_scale", *is);
      s.activations_quantized = true;
    }
  } else {
    // compressed-tensors stores the reciprocals; convert to ModelOpt's convention here.
    if (ws2) bad(module + ".weight_scale_2", "is a ModelOpt name next to compressed-tensors' " + wname);
    if (is) bad(module + ".input_scale", "is a ModelOpt name next to compressed-tensors' " + wname);
    if (!wgs) {
      bad(module + ".weight_global_scale", "is missing; " + wname + " is packed NVFP4 and needs its global scale");
    }
    s.weight_scale_2 = 1.0f / scalar(module + ".weight_global_scale", *wgs, &s.scale_stored_bf16);
    if (igs) {
      s.input_scale = 1.0f / scalar(module + ".input_global_scale", *igs);
      s.activations_quantized = true;
    }
  }
  LinearModule m;
  m.name = module;
  m.out_features = out;
  m.in_features = in;
  m.scheme = std::move(s);
  out_.modules.push_back(std::move(m));
  decls_.push_back(decl);
}

void Resolver::fp8_module(const std::string& module, const std::string& wname, const TensorRef& w,
                          const Params& params) {
  auto param = [&](std::string_view p) -> const TensorRef* {
    auto it = params.find(p);
    return it == params.end() ? nullptr : it->second;
  };
  if (config_.producer == QuantProducer::None) {
    bad(wname,
        "is F8_E4M3 but the checkpoint has no quantization config (no hf_quant_config.json and no "
        "quantization_config in config.json)");
  }
  ModuleQuantDecl decl = config_.decl_for(module);
  if (decl.weight == WeightFormat::Unquantized) {
    if (const std::string* pattern = config_.ignore_match(module)) {
      bad(wname, "is F8_E4M3 (quantized) but module '" + module + "' is excluded by pattern '" + *pattern + "' in " +
                     config_name());
    }
  }
  if (decl.weight != WeightFormat::FP8) {
    bad(wname, "is F8_E4M3 but " + config_name() + " declares module '" + module + "' " + decl_name(decl));
  }
  for (std::string_view extra : {"weight_scale_2", "weight_global_scale", "input_global_scale"}) {
    if (param(extra)) bad(module + "." + std::string(extra), "is not expected next to the FP8 weight " + wname);
  }
  const std::string ws_name = module + ".weight_scale";
  const TensorRef* ws = param("weight_scale");
  if (!ws) bad(ws_name, "is missing; " + wname + " is FP8 and needs its per-tensor scale");
  const auto& shape = w.info->shape;
  const auto& sshape = ws->info->shape;
  if (!is_scalar_shape(sshape)) {
    bool per_channel = (sshape.size() == 1 && sshape[0] == shape[0]) ||
                       (sshape.size() == 2 && sshape[0] == shape[0] && sshape[1] == 1);
    bad(ws_name, "has shape " + shape_to_string(sshape) + "; only per-tensor FP8 scales ([] or [1]) are supported" +
                     (per_channel ? " (this is a per-channel scale)" : " (this looks like a block-wise scale)"));
  }
  QuantScheme s;
  s.kind = SchemeKind::FP8;
  s.storage = DType::F8_E4M3;
  s.weight = wname;
  s.weight_scale_2 = scalar(ws_name, *ws, &s.scale_stored_bf16);
  if (const TensorRef* is = param("input_scale")) {
    s.input_scale = scalar(module + ".input_scale", *is);
    s.activations_quantized = true;
  }
  LinearModule m;
  m.name = module;
  m.out_features = shape[0];
  m.in_features = shape[1];
  m.scheme = std::move(s);
  out_.modules.push_back(std::move(m));
  decls_.push_back(decl);
}

void Resolver::resolve_fused(const std::string& module, const std::string& param, const TensorRef& t) {
  const std::string name = module + "." + param;
  const TensorInfo& info = *t.info;
  if (info.dtype != DType::BF16 && info.dtype != DType::F16 && info.dtype != DType::F32) {
    bad(name, "is a fused 3-D expert tensor of dtype " + std::string(dtype_name(info.dtype)) +
                  "; quantized fused experts are not supported (expected per-expert "
                  "experts.<e>.{gate,up,down}_proj tensors, as ModelOpt exports them)");
  }
  dense_module(name, name, t, Params{}, info.shape[0]);
}

void Resolver::add_warnings() {
  std::vector<std::string>& warn = out_.warnings;
  const auto& mods = out_.modules;
  auto contains = [](std::string_view s, std::string_view part) { return s.find(part) != std::string_view::npos; };

  // Experts NVFP4 while attention / shared experts stay BF16.
  bool experts_nvfp4 = false;
  for (const LinearModule& m : mods) {
    if (m.scheme.kind == SchemeKind::NVFP4 && contains(m.name, ".experts.")) experts_nvfp4 = true;
  }
  if (experts_nvfp4) {
    std::size_t attn = 0, linear = 0, shared = 0;
    for (const LinearModule& m : mods) {
      if (m.scheme.kind != SchemeKind::Dense || conventionally_unquantized(m.name)) continue;
      if (contains(m.name, ".self_attn.")) ++attn;
      if (contains(m.name, ".linear_attn.")) ++linear;
      if (contains(m.name, ".shared_expert.")) ++shared;
    }
    std::vector<std::string> parts;
    if (attn) parts.push_back(std::to_string(attn) + " self-attention");
    if (linear) parts.push_back(std::to_string(linear) + " linear-attention");
    if (shared) parts.push_back(std::to_string(shared) + " shared-expert");
    if (!parts.empty()) {
      std::string list;
      for (std::size_t i = 0; i < parts.size(); ++i) list += (i ? ", " : "") + parts[i];
      warn.push_back("routed experts are NVFP4 but " + list + " projections stay BF16 as the checkpoint stores them");
    }
  }

  // weight_scale_2 stored as BF16.
  std::size_t bf16_scales = 0;
  const LinearModule* first_bf16 = nullptr;
  for (const LinearModule& m : mods) {
    if (m.scheme.scale_stored_bf16) {
      if (!first_bf16) first_bf16 = &m;
      ++bf16_scales;
    }
  }
  if (bf16_scales) {
    warn.push_back(std::to_string(bf16_scales) +
                   " module(s) store their per-tensor scale (weight_scale_2) as BF16 "
                   "instead of F32, e.g. '" +
                   first_bf16->name + "'; loaded and widened to fp32 exactly");
  }

  // W4A4 vs W4A16.
  std::size_t nvfp4 = 0, with_input = 0, declared_a4 = 0, declared_a4_missing = 0, declared_a16_with = 0;
  const LinearModule* missing_example = nullptr;
  for (std::size_t i = 0; i < mods.size(); ++i) {
    const LinearModule& m = mods[i];
    if (m.scheme.kind != SchemeKind::NVFP4) continue;
    ++nvfp4;
    if (m.scheme.activations_quantized) ++with_input;
    if (decls_[i].activations_quantized) {
      ++declared_a4;
      if (!m.scheme.activations_quantized) {
        ++declared_a4_missing;
        if (!missing_example) missing_example = &m;
      }
    } else if (m.scheme.activations_quantized) {
      ++declared_a16_with;
    }
  }
  if (with_input) {
    warn.push_back("W4A4 checkpoint: " + std::to_string(with_input) + " of " + std::to_string(nvfp4) +
                   " NVFP4 modules carry a static input scale (W4A4 is possible; W4A16 ignores it)");
  } else if (nvfp4) {
    warn.push_back(
        "W4A16 checkpoint: no NVFP4 module carries an input scale; only W4A16 (BF16/FP32 activations) "
        "is possible");
  }
  if (declared_a4_missing) {
    warn.push_back(config_name() + " declares NVFP4 activations (W4A4) but " + std::to_string(declared_a4_missing) +
                   " of " + std::to_string(declared_a4) + " NVFP4 modules have no input scale, e.g. '" +
                   missing_example->name + "'; those can only run W4A16");
  }
  if (declared_a16_with) {
    warn.push_back(config_name() + " declares weight-only NVFP4 (W4A16) but " + std::to_string(declared_a16_with) +
                   " modules carry an input scale; it is kept but unused by default");
  }

  // q/k/v and gate/up siblings whose global scales differ (ModelOpt makes them equal).
  std::map<std::string, std::vector<const LinearModule*>> groups;
  for (const LinearModule& m : mods) {
    if (m.scheme.kind != SchemeKind::NVFP4) continue;
    std::size_t dot = m.name.rfind('.');
    if (dot == std::string::npos) continue;
    std::string_view leaf = std::string_view(m.name).substr(dot + 1);
    std::string family;
    if (leaf == "q_proj" || leaf == "k_proj" || leaf == "v_proj") family = "q/k/v";
    if (leaf == "gate_proj" || leaf == "up_proj") family = "gate/up";
    if (family.empty()) continue;
    groups[m.name.substr(0, dot) + " " + family].push_back(&m);
  }
  std::size_t differing = 0;
  std::string example;
  for (const auto& [key, members] : groups) {
    bool differ = false;
    for (const LinearModule* m : members)
      differ = differ || m->scheme.weight_scale_2 != members[0]->scheme.weight_scale_2;
    if (!differ) continue;
    if (!differing) {
      std::ostringstream os;
      os << key.substr(0, key.find(' ')) << ":";
      for (const LinearModule* m : members)
        os << ' ' << m->name.substr(m->name.rfind('.') + 1) << '=' << m->scheme.weight_scale_2;
      example = os.str();
    }
    ++differing;
  }
  if (differing) {
    warn.push_back(std::to_string(differing) + " q/k/v or gate/up group(s) have differing weight_scale_2 (e.g. " +
                   example + "); informational: each projection is dequantized with its own scale");
  }

  if (!exempt_dense_.empty()) {
    warn.push_back(config_name() + " declares " + std::to_string(exempt_dense_.size()) +
                   " module(s) quantized that the checkpoint stores unquantized and quantizers never touch "
                   "(embeddings, lm_head, routers, conv1d, vision, mtp), e.g. '" +
                   exempt_dense_.front() + "'; they stay unquantized");
  }
  std::size_t fused = 0;
  for (const LinearModule& m : mods) fused += m.fused_experts > 0 ? 1 : 0;
  if (fused) {
    warn.push_back(std::to_string(fused) +
                   " fused 3-D expert tensor(s) (experts.gate_up_proj / experts.down_proj) "
                   "are recorded as one module each, covering all experts");
  }
  if (!kv_scale_modules_.empty()) {
    warn.push_back(std::to_string(kv_scale_modules_.size()) +
                   " module(s) carry KV-cache scales (k_scale/v_scale), "
                   "e.g. '" +
                   kv_scale_modules_.front() + "'; the KV cache is kept unquantized, so they are unused");
  }
}

ResolvedQuantization Resolver::run() {
  out_.config = config_;
  std::map<std::string, Params, std::less<>> groups;
  std::vector<std::pair<std::string, const TensorRef*>> fused;  // (experts module, param)
  // Names come sorted, so a module's parameters mostly arrive together: the module found for one
  // serves the next, and a new one belongs at the end of the tree. A 397B checkpoint has 370k
  // tensors; this spares each a tree lookup and two strings.
  std::string_view last_module;
  Params* last_params = nullptr;
  for (const auto& [name, ref] : ckpt_.tensors()) {
    const std::string_view full = name;
    const std::size_t dot = full.rfind('.');
    if (dot == std::string_view::npos) continue;
    const std::string_view module = full.substr(0, dot), param = full.substr(dot + 1);
    if (linear_params().contains(param)) {
      if (last_params == nullptr || module != last_module) {
        last_params = &groups.try_emplace(groups.end(), std::string(module))->second;
        last_module = module;
      }
      last_params->emplace(std::string(param), &ref);
      continue;
    }
    if (ends_with(module, ".experts") || module == "experts") {
      if ((param == "gate_up_proj" || param == "down_proj") && ref.info->shape.size() == 3) {
        fused.emplace_back(name, &ref);
        continue;
      }
      for (std::string_view suffix :
           {"_weight_scale", "_weight_scale_2", "_input_scale", "_weight_global_scale", "_input_global_scale"}) {
        if (ends_with(param, suffix)) {
          bad(name,
              "is a scale of a fused 3-D expert tensor; quantized fused experts are not supported "
              "(expected per-expert experts.<e>.{gate,up,down}_proj tensors, as ModelOpt exports them)");
        }
      }
    }
  }
  for (const auto& [name, ref] : fused) {
    std::size_t dot = name.rfind('.');
    resolve_fused(name.substr(0, dot), name.substr(dot + 1), *ref);
  }
  for (const auto& [module, params] : groups) resolve_module(module, params);

  // Sort by name (fused modules were added while walking), keeping decls_ parallel.
  std::vector<std::size_t> order(out_.modules.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return out_.modules[a].name < out_.modules[b].name; });
  std::vector<LinearModule> modules;
  std::vector<ModuleQuantDecl> decls;
  modules.reserve(order.size());
  decls.reserve(order.size());
  for (std::size_t i : order) {
    modules.push_back(std::move(out_.modules[i]));
    decls.push_back(decls_[i]);
  }
  out_.modules = std::move(modules);
  decls_ = std::move(decls);
  add_warnings();
  return std::move(out_);
}

}  // namespace

std::string_view scheme_kind_name(SchemeKind kind) {
  switch (kind) {
    case SchemeKind::Dense: return "dense";
    case SchemeKind::NVFP4: return "nvfp4";
    case SchemeKind::FP8: return "fp8";
  }
  return "unknown";
}

const LinearModule* ResolvedQuantization::find(std::string_view module) const {
  auto it = std::lower_bound(modules.begin(), modules.end(), module,
                             [](const LinearModule& m, std::string_view name) { return m.name < name; });
  if (it == modules.end() || it->name != module) return nullptr;
  return &*it;
}

ResolvedQuantization resolve_quantization(const Checkpoint& checkpoint, const QuantConfig& config,
                                          ScaleValues scale_values) {
  return Resolver(checkpoint, config, scale_values).run();
}

}  // namespace fp4serve
