#include "kernels/shapes.h"

#include <sstream>

#include "kernels/kv_cache.h"

namespace fp4serve::kernels {

namespace {

std::string kind_text(SchemeKind kind, DType dtype) {
  if (kind == SchemeKind::Dense) return std::string(dtype_name(dtype));
  return std::string(scheme_kind_name(kind));
}

}  // namespace

std::string describe(const GemmShape& s) {
  std::ostringstream os;
  os << kind_text(s.kind, s.dtype) << " " << s.n << "x" << s.k;
  if (s.model_n != 0 && s.model_n != s.n) os << " (N capped from " << s.model_n << ")";
  if (!s.example.empty()) os << " [" << s.example << "]";
  return os.str();
}

std::string describe(const MoeShape& s) {
  std::ostringstream os;
  os << s.experts << " experts top-" << s.top_k << " " << kind_text(s.expert_kind, s.expert_dtype) << " hidden " << s.hidden
     << " x intermediate " << s.intermediate << ", router " << kind_text(s.router_kind, s.router_dtype);
  return os.str();
}

std::string describe(const AttentionShape& s) {
  std::ostringstream os;
  os << s.heads << " heads / " << s.kv_heads << " kv heads x " << s.head_dim;
  if (s.kv_dtype != DType::F32) os << ", " << kv_dtype_name(s.kv_dtype) << " KV cache";
  return os.str();
}

std::string describe(const LinearAttentionShape& s) {
  std::ostringstream os;
  os << "conv1d " << s.conv_channels << " channels x " << s.conv_kernel << " taps, delta rule " << s.value_heads
     << " value / " << s.key_heads << " key heads, state " << s.key_dim << "x" << s.value_dim;
  return os.str();
}

std::string_view family_name(OpFamily family) {
  switch (family) {
    case OpFamily::DenseGemm: return "dense";
    case OpFamily::Fp4Gemm: return "fp4-gemm";
    case OpFamily::Moe: return "moe";
    case OpFamily::Attention: return "attention";
    case OpFamily::LinearAttention: return "linear-attention";
  }
  return "?";
}

std::string_view family_flag(OpFamily family) {
  switch (family) {
    case OpFamily::DenseGemm: return "--dense-backend";
    case OpFamily::Fp4Gemm: return "--fp4-gemm-backend";
    case OpFamily::Moe: return "--moe-backend";
    case OpFamily::Attention: return "--attention-backend";
    case OpFamily::LinearAttention: return "--linear-attention-backend";
  }
  return "?";
}

}  // namespace fp4serve::kernels
