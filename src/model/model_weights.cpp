#include "model/model_weights.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "formats/quant_config.h"
#include "model/tensor_roles.h"
#include "model/weight_layout.h"
#include "numerics/nvfp4.h"
#include "numerics/scalar_formats.h"
#include "util/error.h"

namespace fp4serve {

namespace {

std::string shape_str(const std::vector<std::int64_t>& shape) {
  std::ostringstream os;
  os << '[';
  for (std::size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << ']';
  return os.str();
}

float scalar_to_float(DType dtype, const std::uint8_t* p) {
  switch (dtype) {
    case DType::F32: {
      const std::uint32_t u = static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
                              static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
      return std::bit_cast<float>(u);
    }
    case DType::BF16: return bf16_to_float(static_cast<std::uint16_t>(p[0] | p[1] << 8));
    case DType::F16: return fp16_to_float(static_cast<std::uint16_t>(p[0] | p[1] << 8));
    default: return NAN;
  }
}

// Builds the views, checking every tensor the modeling file reads.
class Loader {
 public:
  Loader(ModelWeights& out) : w_(out), dir_(out.checkpoint->dir().string()) {}

  void run();
  // qwen3_next / qwen3_5_moe: names built here from the modeling files (weight_layout does not
  // cover them).
  void run_hybrid();

 private:
  [[noreturn]] void bad(const std::string& tensor, const std::string& what) const {
    fail(dir_, ": tensor '", tensor, "' ", what);
  }
  kernels::WeightMatrix linear(const ParamSpec& spec);
  std::vector<float> gain(const ParamSpec& spec);
  void note_used(const std::string& module, const LinearModule* m);
  kernels::WeightMatrix lin(const std::string& module, std::int64_t out, std::int64_t in) {
    return linear(ParamSpec{module, ParamKind::Linear, {out, in}});
  }
  // A float tensor of exactly `shape` (F32, BF16 or F16), widened to fp32.
  std::vector<float> floats(const std::string& name, const std::vector<std::int64_t>& shape);
  // RMSNorm gain; zero-centred ones become 1 + w.
  std::vector<float> norm_gain(const std::string& module, std::int64_t dim, bool zero_centred);
  void load_linear_attention(const std::string& p, LinearAttentionWeights& la);
  void load_gated_attention(const std::string& p, AttentionWeights& at);
  void load_hybrid_moe(const std::string& p, DecoderLayerWeights& layer);
  kernels::WeightMatrix fused(const std::string& name, std::int64_t experts, std::int64_t out, std::int64_t in);
  void warn_unused();

  ModelWeights& w_;
  std::string dir_;
  std::map<std::string, kernels::WeightMatrix> linears_;
  std::map<std::string, std::vector<float>> gains_;
  std::set<std::string, std::less<>> used_;  // tensor names the model reads
};

kernels::WeightMatrix Loader::linear(const ParamSpec& spec) {
  const Checkpoint& ckpt = *w_.checkpoint;
  const std::int64_t out = spec.shape[0], in = spec.shape[1];
  const std::string weight = spec.module + ".weight";
  const LinearModule* m = w_.quantization.find(spec.module);
  if (!m) {
    // resolve_quantization records every 2-D weight; no module means absent or not 2-D.
    const TensorRef* t = ckpt.find(weight);
    if (!t) t = ckpt.find(spec.module + ".weight_packed");
    if (!t) {
      bad(weight, "is missing; the model needs it with shape " + shape_str(spec.shape) + " (config: " +
                      std::string(arch_name(w_.config.arch)) + ")");
    }
    bad(t->info->name, "has shape " + shape_str(t->info->shape) + ", expected " + shape_str(spec.shape));
  }
  if (m->fused_experts > 0) bad(m->scheme.weight, "is a fused 3-D expert tensor, which the model does not read");
  const TensorRef& t = ckpt.at(m->scheme.weight);
  if (m->out_features != out || m->in_features != in) {
    std::string stored = shape_str(t.info->shape);
    if (m->scheme.kind == SchemeKind::NVFP4) stored += " (packed NVFP4: " + shape_str({m->out_features, m->in_features}) + ")";
    bad(m->scheme.weight, "has shape " + stored + ", expected " + shape_str(spec.shape));
  }
  kernels::WeightMatrix wm;
  wm.kind = m->scheme.kind;
  wm.dtype = m->scheme.storage;
  wm.n = out;
  wm.k = in;
  wm.data = t.bytes().data();
  wm.weight_scale_2 = m->scheme.weight_scale_2;
  wm.input_scale = m->scheme.input_scale;
  switch (m->scheme.kind) {
    case SchemeKind::Dense:
      if (wm.dtype != DType::BF16 && wm.dtype != DType::F16 && wm.dtype != DType::F32) {
        bad(m->scheme.weight, "has dtype " + std::string(dtype_name(wm.dtype)) + "; expected BF16, F16 or F32");
      }
      break;
    case SchemeKind::NVFP4: wm.block_scales = ckpt.at(m->scheme.block_scale).bytes().data(); break;
    case SchemeKind::FP8: break;
  }
  note_used(spec.module, m);
  return wm;
}

void Loader::note_used(const std::string& module, const LinearModule* m) {
  used_.insert(m->scheme.weight);
  for (const char* p : {".weight_scale", ".weight_scale_2", ".weight_global_scale", ".input_scale",
                        ".input_global_scale", ".k_scale", ".v_scale"}) {
    used_.insert(module + p);
  }
}

std::vector<float> Loader::gain(const ParamSpec& spec) {
  const std::string name = spec.module + ".weight";
  const TensorRef* t = w_.checkpoint->find(name);
  if (!t) bad(name, "is missing; the model needs it with shape " + shape_str(spec.shape));
  const TensorInfo& info = *t->info;
  if (info.shape != spec.shape) bad(name, "has shape " + shape_str(info.shape) + ", expected " + shape_str(spec.shape));
  if (info.dtype != DType::F32 && info.dtype != DType::BF16 && info.dtype != DType::F16) {
    bad(name, "has dtype " + std::string(dtype_name(info.dtype)) + "; an RMSNorm weight must be F32, BF16 or F16");
  }
  const std::span<const std::uint8_t> bytes = t->bytes();
  const std::size_t size = dtype_size(info.dtype);
  std::vector<float> out(static_cast<std::size_t>(spec.shape[0]));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = scalar_to_float(info.dtype, bytes.data() + i * size);
  used_.insert(name);
  return out;
}

void Loader::run() {
  const ModelConfig& c = w_.config;
  if (c.attention_bias) fail(dir_, "/config.json: attention_bias is true; biased q/k/v/o projections are not supported");
  for (const ParamSpec& spec : weight_layout(c)) {
    switch (spec.kind) {
      case ParamKind::Linear:
      case ParamKind::Embedding: linears_[spec.module] = linear(spec); break;
      case ParamKind::NormGain: gains_[spec.module] = gain(spec); break;
      case ParamKind::Conv1d:
      case ParamKind::Vector: fail(dir_, ": tensor '", spec.tensor_name(), "' belongs to linear attention, which this loader does not read");
    }
  }
  auto L = [&](const std::string& module) { return linears_.at(module); };
  auto G = [&](const std::string& module) { return std::move(gains_.at(module)); };
  const std::string& root = c.weight_prefix;
  w_.embed_tokens = L(root + "embed_tokens");
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = root + "layers." + std::to_string(i) + ".";
    DecoderLayerWeights layer;
    layer.input_layernorm = G(p + "input_layernorm");
    layer.post_attention_layernorm = G(p + "post_attention_layernorm");
    layer.self_attn.q_proj = L(p + "self_attn.q_proj");
    layer.self_attn.k_proj = L(p + "self_attn.k_proj");
    layer.self_attn.v_proj = L(p + "self_attn.v_proj");
    layer.self_attn.o_proj = L(p + "self_attn.o_proj");
    layer.self_attn.q_norm = G(p + "self_attn.q_norm");
    layer.self_attn.k_norm = G(p + "self_attn.k_norm");
    layer.sparse_moe = c.is_moe_layer(i);
    if (layer.sparse_moe) {
      layer.moe.router = L(p + "mlp.gate");
      layer.moe.top_k = c.num_experts_per_tok;
      layer.moe.norm_topk_prob = c.norm_topk_prob;
      for (std::int64_t e = 0; e < c.num_experts; ++e) {
        const std::string ex = p + "mlp.experts." + std::to_string(e) + ".";
        layer.moe.experts.push_back({L(ex + "gate_proj"), L(ex + "up_proj"), L(ex + "down_proj")});
      }
    } else {
      layer.mlp = {L(p + "mlp.gate_proj"), L(p + "mlp.up_proj"), L(p + "mlp.down_proj")};
    }
    w_.layers.push_back(std::move(layer));
  }
  w_.norm = G(root + "norm");
  // Tied: transformers points lm_head at the embedding table and ignores any stored lm_head.
  w_.lm_head = c.tie_word_embeddings ? w_.embed_tokens : L("lm_head");
  warn_unused();
}

void Loader::warn_unused() {
  std::vector<std::string> unused;
  for (const auto& [name, ref] : w_.checkpoint->tensors()) {
    if (!used_.count(name)) unused.push_back(name);
  }
  if (!unused.empty()) {
    std::string list;
    for (std::size_t i = 0; i < unused.size() && i < 3; ++i) list += (i ? ", " : "") + unused[i];
    if (unused.size() > 3) list += ", ...";
    w_.warnings.push_back(std::to_string(unused.size()) + " checkpoint tensor(s) are not used by the model: " + list);
  }
}

std::vector<float> Loader::floats(const std::string& name, const std::vector<std::int64_t>& shape) {
  const TensorRef* t = w_.checkpoint->find(name);
  if (!t) bad(name, "is missing; the model needs it with shape " + shape_str(shape));
  const TensorInfo& info = *t->info;
  if (info.shape != shape) bad(name, "has shape " + shape_str(info.shape) + ", expected " + shape_str(shape));
  if (info.dtype != DType::F32 && info.dtype != DType::BF16 && info.dtype != DType::F16)
    bad(name, "has dtype " + std::string(dtype_name(info.dtype)) + "; expected F32, BF16 or F16");
  const std::span<const std::uint8_t> bytes = t->bytes();
  const std::size_t size = dtype_size(info.dtype);
  std::vector<float> out(bytes.size() / size);
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = scalar_to_float(info.dtype, bytes.data() + i * size);
  used_.insert(name);
  return out;
}

std::vector<float> Loader::norm_gain(const std::string& module, std::int64_t dim, bool zero_centred) {
  std::vector<float> g = gain(ParamSpec{module, ParamKind::NormGain, {dim}});
  // Qwen3_5MoeRMSNorm / Qwen3NextRMSNorm: output * (1.0 + self.weight.float()), the sum in fp32.
  if (zero_centred)
    for (float& v : g) v = 1.0f + v;
  return g;
}

// Qwen3_5MoeGatedDeltaNet / Qwen3NextGatedDeltaNet parameters.
void Loader::load_linear_attention(const std::string& p, LinearAttentionWeights& la) {
  const ModelConfig& c = w_.config;
  const std::int64_t H = c.hidden_size, Hv = c.linear_num_value_heads;
  const std::int64_t key_dim = c.linear_num_key_heads * c.linear_key_head_dim;
  const std::int64_t value_dim = Hv * c.linear_value_head_dim;
  const std::int64_t conv_dim = 2 * key_dim + value_dim, K = c.linear_conv_kernel_dim;
  const std::string a = p + "linear_attn.";
  const Checkpoint& ckpt = *w_.checkpoint;
  auto present = [&](const std::string& module) {
    return ckpt.find(module + ".weight") != nullptr || ckpt.find(module + ".weight_packed") != nullptr;
  };
  if (present(a + "in_proj_qkvz")) {
    if (present(a + "in_proj_qkv"))
      bad(a + "in_proj_qkvz.weight", "and " + a + "in_proj_qkv.weight are both present; a checkpoint has one layout");
    la.layout = LinearAttnLayout::GroupedQkvz;
    la.in_proj_qkvz = lin(a + "in_proj_qkvz", 2 * key_dim + 2 * value_dim, H);
    la.in_proj_ba = lin(a + "in_proj_ba", 2 * Hv, H);
  } else {
    la.layout = LinearAttnLayout::Split;
    la.in_proj_qkv = lin(a + "in_proj_qkv", conv_dim, H);
    la.in_proj_z = lin(a + "in_proj_z", value_dim, H);
    la.in_proj_b = lin(a + "in_proj_b", Hv, H);
    la.in_proj_a = lin(a + "in_proj_a", Hv, H);
  }
  // conv1d.weight [conv_dim, 1, K] -> [K, conv_dim] so a tap is contiguous across channels.
  const std::vector<float> conv = floats(a + "conv1d.weight", {conv_dim, 1, K});
  la.conv1d.resize(conv.size());
  for (std::int64_t ch = 0; ch < conv_dim; ++ch)
    for (std::int64_t j = 0; j < K; ++j)
      la.conv1d[static_cast<std::size_t>(j * conv_dim + ch)] = conv[static_cast<std::size_t>(ch * K + j)];
  if (ckpt.find(a + "conv1d.bias")) bad(a + "conv1d.bias", "is present; the conv1d of Gated DeltaNet has no bias");
  la.A_log = floats(a + "A_log", {Hv});
  la.dt_bias = floats(a + "dt_bias", {Hv});
  la.norm = gain(ParamSpec{a + "norm", ParamKind::NormGain, {c.linear_value_head_dim}});
  la.out_proj = lin(a + "out_proj", H, value_dim);
}

// Qwen3_5MoeAttention / Qwen3NextAttention: q_proj carries the output gate when attn_output_gate.
void Loader::load_gated_attention(const std::string& p, AttentionWeights& at) {
  const ModelConfig& c = w_.config;
  const std::int64_t H = c.hidden_size, D = c.head_dim;
  const std::int64_t q_rows = c.num_attention_heads * D * (c.attn_output_gate ? 2 : 1);
  at.q_proj = lin(p + "self_attn.q_proj", q_rows, H);
  at.k_proj = lin(p + "self_attn.k_proj", c.num_key_value_heads * D, H);
  at.v_proj = lin(p + "self_attn.v_proj", c.num_key_value_heads * D, H);
  at.o_proj = lin(p + "self_attn.o_proj", H, c.num_attention_heads * D);
  at.q_norm = norm_gain(p + "self_attn.q_norm", D, c.zero_centered_norm);
  at.k_norm = norm_gain(p + "self_attn.k_norm", D, c.zero_centered_norm);
}

kernels::WeightMatrix Loader::fused(const std::string& name, std::int64_t experts, std::int64_t out, std::int64_t in) {
  const LinearModule* m = w_.quantization.find(name);
  const TensorRef* t = w_.checkpoint->find(name);
  if (!t) bad(name, "is missing");
  if (!m || m->fused_experts != experts || m->out_features != out || m->in_features != in)
    bad(name, "has shape " + shape_str(t->info->shape) + ", expected " + shape_str({experts, out, in}));
  kernels::WeightMatrix wm;
  wm.kind = SchemeKind::Dense;
  wm.dtype = m->scheme.storage;
  wm.n = experts * out;
  wm.k = in;
  wm.data = t->bytes().data();
  used_.insert(name);
  return wm;
}

// Qwen3_5MoeSparseMoeBlock / Qwen3NextSparseMoeBlock (router, routed experts, shared expert and
// its gate), or the dense Qwen3NextMLP of an mlp_only layer.
void Loader::load_hybrid_moe(const std::string& p, DecoderLayerWeights& layer) {
  const ModelConfig& c = w_.config;
  const std::int64_t H = c.hidden_size;
  auto swiglu = [&](const std::string& q, std::int64_t inner) {
    return MlpWeights{lin(q + "gate_proj", inner, H), lin(q + "up_proj", inner, H), lin(q + "down_proj", H, inner)};
  };
  if (!layer.sparse_moe) {
    layer.mlp = swiglu(p + "mlp.", c.intermediate_size);
    return;
  }
  const std::int64_t E = c.num_experts, I = c.moe_intermediate_size;
  layer.moe.router = lin(p + "mlp.gate", E, H);
  layer.moe.top_k = c.num_experts_per_tok;
  layer.moe.norm_topk_prob = c.norm_topk_prob;
  const std::string gate_up = p + "mlp.experts.gate_up_proj", down = p + "mlp.experts.down_proj";
  const Checkpoint& ckpt = *w_.checkpoint;
  if (ckpt.find(gate_up) || ckpt.find(down)) {
    // transformers v5 layout, stored without transposition: rows [0, I) of gate_up_proj[e] are
    // gate_proj, rows [I, 2I) up_proj. Per-expert views into the mapping, no copies.
    if (ckpt.find(p + "mlp.experts.0.gate_proj.weight"))
      bad(gate_up, "and per-expert tensors (" + p + "mlp.experts.0.gate_proj.weight) are both present");
    layer.fused_experts = true;
    layer.fused_gate_up = fused(gate_up, E, 2 * I, H);
    layer.fused_down = fused(down, E, H, I);
    const std::size_t es = dtype_size(layer.fused_gate_up.dtype);
    for (std::int64_t e = 0; e < E; ++e) {
      kernels::MoeExpert ex;
      ex.gate = ex.up = layer.fused_gate_up;
      ex.gate.n = ex.up.n = I;
      ex.gate.data += static_cast<std::size_t>(e * 2 * I * H) * es;
      ex.up.data += static_cast<std::size_t>((e * 2 * I + I) * H) * es;
      ex.down = layer.fused_down;
      ex.down.n = H;
      ex.down.data += static_cast<std::size_t>(e * H * I) * es;
      layer.moe.experts.push_back(ex);
    }
  } else {
    for (std::int64_t e = 0; e < E; ++e) {
      const MlpWeights m = swiglu(p + "mlp.experts." + std::to_string(e) + ".", I);
      layer.moe.experts.push_back({m.gate_proj, m.up_proj, m.down_proj});
    }
  }
  layer.has_shared_expert = true;
  layer.shared_expert = swiglu(p + "mlp.shared_expert.", c.shared_expert_intermediate_size);
  layer.shared_expert_gate = lin(p + "mlp.shared_expert_gate", 1, H);
}

void Loader::run_hybrid() {
  ModelConfig& c = w_.config;
  if (c.attention_bias) fail(dir_, "/config.json: attention_bias is true; biased q/k/v/o projections are not supported");
  // Qwen3.5 text weights sit under model.language_model. (the multimodal release, and ModelOpt's
  // export even with a flat text config) or model. (text-only conversions): the tensors decide.
  for (const char* prefix : {"model.language_model.", "model."}) {
    const Checkpoint& ckpt = *w_.checkpoint;
    if (!ckpt.find(c.weight_prefix + "embed_tokens.weight") && ckpt.find(std::string(prefix) + "embed_tokens.weight"))
      c.weight_prefix = prefix;
  }
  const std::string& root = c.weight_prefix;
  const std::int64_t H = c.hidden_size;
  w_.embed_tokens = linear(ParamSpec{root + "embed_tokens", ParamKind::Embedding, {c.vocab_size, H}});
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const std::string p = root + "layers." + std::to_string(i) + ".";
    DecoderLayerWeights layer;
    layer.type = c.layer_types[static_cast<std::size_t>(i)];
    layer.input_layernorm = norm_gain(p + "input_layernorm", H, c.zero_centered_norm);
    layer.post_attention_layernorm = norm_gain(p + "post_attention_layernorm", H, c.zero_centered_norm);
    if (layer.type == LayerType::LinearAttention) load_linear_attention(p, layer.linear_attn);
    else load_gated_attention(p, layer.self_attn);
    layer.sparse_moe = c.is_moe_layer(i);
    load_hybrid_moe(p, layer);
    w_.layers.push_back(std::move(layer));
  }
  w_.norm = norm_gain(root + "norm", H, c.zero_centered_norm);
  w_.lm_head = c.tie_word_embeddings ? w_.embed_tokens : lin("lm_head", c.vocab_size, H);
  warn_unused();
}

}  // namespace

std::vector<NamedMatrix> ModelWeights::matrices() const {
  std::vector<NamedMatrix> out;
  const std::string& root = config.weight_prefix;
  out.push_back({root + "embed_tokens.weight", &embed_tokens});
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const std::string p = root + "layers." + std::to_string(i) + ".";
    const DecoderLayerWeights& l = layers[i];
    if (l.type == LayerType::LinearAttention) {
      const LinearAttentionWeights& la = l.linear_attn;
      const std::string a = p + "linear_attn.";
      if (la.layout == LinearAttnLayout::Split) {
        out.push_back({a + "in_proj_qkv.weight", &la.in_proj_qkv});
        out.push_back({a + "in_proj_z.weight", &la.in_proj_z});
        out.push_back({a + "in_proj_b.weight", &la.in_proj_b});
        out.push_back({a + "in_proj_a.weight", &la.in_proj_a});
      } else {
        out.push_back({a + "in_proj_qkvz.weight", &la.in_proj_qkvz});
        out.push_back({a + "in_proj_ba.weight", &la.in_proj_ba});
      }
      out.push_back({a + "out_proj.weight", &la.out_proj});
    } else {
      out.push_back({p + "self_attn.q_proj.weight", &l.self_attn.q_proj});
      out.push_back({p + "self_attn.k_proj.weight", &l.self_attn.k_proj});
      out.push_back({p + "self_attn.v_proj.weight", &l.self_attn.v_proj});
      out.push_back({p + "self_attn.o_proj.weight", &l.self_attn.o_proj});
    }
    if (l.has_shared_expert) {
      out.push_back({p + "mlp.shared_expert.gate_proj.weight", &l.shared_expert.gate_proj});
      out.push_back({p + "mlp.shared_expert.up_proj.weight", &l.shared_expert.up_proj});
      out.push_back({p + "mlp.shared_expert.down_proj.weight", &l.shared_expert.down_proj});
      out.push_back({p + "mlp.shared_expert_gate.weight", &l.shared_expert_gate});
    }
    if (l.sparse_moe && l.fused_experts) {
      out.push_back({p + "mlp.gate.weight", &l.moe.router});
      out.push_back({p + "mlp.experts.gate_up_proj", &l.fused_gate_up});
      out.push_back({p + "mlp.experts.down_proj", &l.fused_down});
    } else if (l.sparse_moe) {
      out.push_back({p + "mlp.gate.weight", &l.moe.router});
      for (std::size_t e = 0; e < l.moe.experts.size(); ++e) {
        const std::string ex = p + "mlp.experts." + std::to_string(e) + ".";
        out.push_back({ex + "gate_proj.weight", &l.moe.experts[e].gate});
        out.push_back({ex + "up_proj.weight", &l.moe.experts[e].up});
        out.push_back({ex + "down_proj.weight", &l.moe.experts[e].down});
      }
    } else {
      out.push_back({p + "mlp.gate_proj.weight", &l.mlp.gate_proj});
      out.push_back({p + "mlp.up_proj.weight", &l.mlp.up_proj});
      out.push_back({p + "mlp.down_proj.weight", &l.mlp.down_proj});
    }
  }
  if (!config.tie_word_embeddings) out.push_back({"lm_head.weight", &lm_head});
  return out;
}

std::vector<std::string> ModelWeights::nvfp4_without_input_scale() const {
  std::vector<std::string> out;
  for (const NamedMatrix& m : matrices()) {
    if (m.matrix->kind == SchemeKind::NVFP4 && !(m.matrix->input_scale > 0.0f)) out.push_back(m.name);
  }
  return out;
}

std::int64_t ModelWeights::nvfp4_matrices() const {
  std::int64_t n = 0;
  for (const NamedMatrix& m : matrices()) n += m.matrix->kind == SchemeKind::NVFP4 ? 1 : 0;
  return n;
}

ModelWeights load_model_weights(const std::filesystem::path& model_dir) {
  ModelWeights w;
  w.config = load_model_config(model_dir);
  w.checkpoint = std::make_unique<Checkpoint>(Checkpoint::open(model_dir));
  w.quantization = resolve_quantization(*w.checkpoint, load_quant_config(model_dir));
  const bool hybrid = w.config.arch == Arch::Qwen3Next || w.config.arch == Arch::Qwen3_5Moe;
  if (hybrid) Loader(w).run_hybrid();
  else Loader(w).run();
  return w;
}

// ---- --check-weights -----------------------------------------------------------------------

namespace {

struct ScanJob {
  std::string tensor;
  DType dtype;      // how to read the bytes; U8 = E2M1 codes (always finite), F8_E4M3 = E4M3
  std::span<const std::uint8_t> bytes;
  std::int64_t row_length = 0;  // elements per row, to report a position
};

// NaN / Inf counts of one tensor, with the first bad element's (row, column).
std::string scan(const ScanJob& job, std::uint64_t& values) {
  std::uint64_t nan = 0, inf = 0, first = 0;
  bool found = false;
  const std::size_t size = job.dtype == DType::U8 ? 1 : dtype_size(job.dtype);
  const std::size_t count = job.bytes.size() / size;
  values += job.dtype == DType::U8 ? 2 * count : count;
  if (job.dtype == DType::U8) return {};
  const std::uint8_t* p = job.bytes.data();
  for (std::size_t i = 0; i < count; ++i) {
    float v = 0.0f;
    if (job.dtype == DType::F8_E4M3) v = e4m3_to_float(p[i]);
    else v = scalar_to_float(job.dtype, p + i * size);
    if (std::isfinite(v)) continue;
    (std::isnan(v) ? nan : inf) += 1;
    if (!found) first = i, found = true;
  }
  if (!found) return {};
  std::ostringstream os;
  os << "tensor '" << job.tensor << "' (" << dtype_name(job.dtype) << ") has " << nan << " NaN and " << inf
     << " Inf value(s); the first at row " << first / static_cast<std::uint64_t>(job.row_length) << ", column "
     << first % static_cast<std::uint64_t>(job.row_length);
  return os.str();
}

}  // namespace

WeightCheckReport check_weights(const ModelWeights& weights, unsigned threads) {
  std::vector<ScanJob> jobs;
  const Checkpoint& ckpt = *weights.checkpoint;
  for (const NamedMatrix& nm : weights.matrices()) {
    const kernels::WeightMatrix& m = *nm.matrix;
    const LinearModule* mod = weights.quantization.find(nm.name.substr(0, nm.name.rfind('.')));
    const std::string weight_name = mod ? mod->scheme.weight : nm.name;
    const TensorRef& t = ckpt.at(weight_name);
    switch (m.kind) {
      case SchemeKind::Dense: jobs.push_back({weight_name, m.dtype, t.bytes(), m.k}); break;
      case SchemeKind::FP8: jobs.push_back({weight_name, DType::F8_E4M3, t.bytes(), m.k}); break;
      case SchemeKind::NVFP4:
        jobs.push_back({weight_name, DType::U8, t.bytes(), m.k / 2});
        jobs.push_back({mod->scheme.block_scale, DType::F8_E4M3, ckpt.at(mod->scheme.block_scale).bytes(),
                        m.k / nvfp4::kBlock});
        break;
    }
  }
  // RMSNorm gains, straight from the checkpoint (the loader already widened them to fp32).
  // Gated DeltaNet's non-matrix parameters too (A_log, dt_bias, the gated norm, conv1d).
  for (const auto& [name, ref] : ckpt.tensors()) {
    const auto& shape = ref.info->shape;
    const TensorRole role = classify_tensor(name).role;
    const bool gain = shape.size() == 1 && role == TensorRole::Norm;
    const bool linear_attn = role == TensorRole::LinearAttention && shape.size() != 2 && !shape.empty();
    if (gain || linear_attn) jobs.push_back({name, ref.info->dtype, ref.bytes(), shape.back()});
  }

  WeightCheckReport report;
  report.tensors = static_cast<std::int64_t>(jobs.size());
  std::vector<std::string> results(jobs.size());
  std::vector<std::uint64_t> counts(jobs.size(), 0);
  const unsigned n = threads ? threads : std::max(1u, std::thread::hardware_concurrency());
  std::atomic<std::size_t> next{0};
  auto worker = [&] {
    for (std::size_t i = next++; i < jobs.size(); i = next++) results[i] = scan(jobs[i], counts[i]);
  };
  std::vector<std::thread> pool;
  for (unsigned i = 1; i < n; ++i) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  for (std::size_t i = 0; i < jobs.size(); ++i) {
    report.values += counts[i];
    if (!results[i].empty()) report.problems.push_back(std::move(results[i]));
  }
  return report;
}

}  // namespace fp4serve
