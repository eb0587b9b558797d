#include "kernels/faults.h"

#include <cmath>
#include <cstring>
#include <map>
#include <optional>

#include "formats/dtype.h"
#include "kernels/kv_cache.h"
#include "kernels/paged_kv.h"
#include "kernels/shapes.h"
#include "util/error.h"

namespace fp4serve::kernels {

namespace {

thread_local int tl_validation_depth = 0;

constexpr std::pair<FaultKind, std::string_view> kKinds[] = {
    {FaultKind::Nan, "nan"},           {FaultKind::Zeros, "zeros"}, {FaultKind::NibbleSwap, "nibble-swap"},
    {FaultKind::NoBlockScale, "no-block-scale"}, {FaultKind::Tail, "tail"}, {FaultKind::LateNan, "late-nan"},
};

std::string known_kinds() {
  std::string s;
  for (const auto& [k, n] : kKinds) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

std::vector<std::string_view> split(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  while (true) {
    const auto p = s.find(sep);
    out.push_back(s.substr(0, p));
    if (p == std::string_view::npos) return out;
    s = s.substr(p + 1);
  }
}

// State shared by the faulty kernels of one wrapped family.
struct State {
  std::vector<FaultSpec> faults;
  std::int64_t m_tile = 1;
  std::atomic<std::int64_t> real_calls{0};

  bool has(FaultKind k) const {
    for (const auto& f : faults)
      if (f.kind == k) return true;
    return false;
  }
  // Called once per kernel call: whether this call's output gets a NaN.
  bool nan_now() {
    bool nan = has(FaultKind::Nan);
    for (const auto& f : faults) {
      if (f.kind != FaultKind::LateNan) continue;
      if (ValidationScope::active()) nan |= real_calls.load() > f.after_calls;
      else nan |= real_calls.fetch_add(1) >= f.after_calls;
    }
    return nan;
  }
  // Rows actually computed under `tail`: those of the full M tiles, when there is one.
  std::int64_t rows(std::int64_t m) const {
    if (!has(FaultKind::Tail)) return m;
    const std::int64_t full = m / m_tile * m_tile;
    return full > 0 ? full : m;
  }
};

// A weight transformed by nibble-swap / no-block-scale, owning the transformed bytes.
struct WeightCopy {
  std::vector<std::uint8_t> data, scales;
};

// Returns the weight as the faulty kernel reads it; sets *out_factor for emulated scale drops.
WeightMatrix corrupt(const WeightMatrix& w, const State& s, WeightCopy& copy, float* out_factor) {
  WeightMatrix r = w;
  if (s.has(FaultKind::NibbleSwap)) {
    std::size_t bytes = 0;
    switch (w.kind) {
      case SchemeKind::NVFP4: bytes = static_cast<std::size_t>(w.n * w.k / 2); break;
      case SchemeKind::FP8: bytes = static_cast<std::size_t>(w.n * w.k); break;
      case SchemeKind::Dense: bytes = static_cast<std::size_t>(w.n * w.k) * dtype_size(w.dtype); break;
    }
    copy.data.assign(w.data, w.data + bytes);
    if (w.kind != SchemeKind::Dense) {
      for (auto& b : copy.data) b = static_cast<std::uint8_t>((b >> 4) | (b << 4));
    } else if (w.dtype == DType::F32) {
      for (std::size_t i = 0; i + 4 <= bytes; i += 4) {
        std::swap(copy.data[i], copy.data[i + 2]);
        std::swap(copy.data[i + 1], copy.data[i + 3]);
      }
    } else {
      for (std::size_t i = 0; i + 2 <= bytes; i += 2) std::swap(copy.data[i], copy.data[i + 1]);
    }
    r.data = copy.data.data();
  }
  if (s.has(FaultKind::NoBlockScale)) {
    if (w.kind == SchemeKind::NVFP4) {
      copy.scales.assign(static_cast<std::size_t>(w.n * w.k / 16), 0x38);  // E4M3 1.0
      r.block_scales = copy.scales.data();
    } else if (w.kind == SchemeKind::FP8) {
      r.weight_scale_2 = 1.0f;
    } else {
      *out_factor = 2.0f;
    }
  }
  return r;
}

void finish(float* y, std::int64_t m, std::int64_t cols, State& s, float factor) {
  const auto total = static_cast<std::size_t>(s.rows(m) * cols);
  if (factor != 1.0f)
    for (std::size_t i = 0; i < total; ++i) y[i] *= factor;
  if (s.has(FaultKind::Zeros)) std::memset(y, 0, static_cast<std::size_t>(m * cols) * sizeof(float));
  if (s.nan_now() && m > 0 && cols > 0) y[(m - 1) * cols + cols / 2] = NAN;
}

class FaultyGemm final : public GemmKernel {
 public:
  FaultyGemm(const GemmKernel* inner, State* s) : inner_(inner), s_(s) {}
  void run(const float* x, std::int64_t m, const WeightMatrix& w, float* y, Fp4Semantics sem) const override {
    WeightCopy copy;
    float factor = 1.0f;
    const WeightMatrix ww = corrupt(w, *s_, copy, &factor);
    inner_->run(x, s_->rows(m), ww, y, sem);
    finish(y, m, w.n, *s_, factor);
  }

 private:
  const GemmKernel* inner_;
  State* s_;
};

class FaultyMoe final : public MoeKernel {
 public:
  FaultyMoe(const MoeKernel* inner, State* s) : inner_(inner), s_(s) {}
  void run(const float* x, std::int64_t m, const MoeLayer& layer, float* y, Fp4Semantics sem) const override {
    MoeLayer l = layer;
    float factor = 1.0f;
    std::map<const std::uint8_t*, std::pair<WeightCopy, WeightMatrix>> done;  // experts may share data
    if (s_->has(FaultKind::NibbleSwap) || s_->has(FaultKind::NoBlockScale))
      for (MoeExpert& ex : l.experts)
        for (WeightMatrix* w : {&ex.gate, &ex.up, &ex.down}) {
          auto it = done.find(w->data);
          if (it == done.end()) {
            it = done.emplace(w->data, std::pair<WeightCopy, WeightMatrix>{}).first;
            it->second.second = corrupt(*w, *s_, it->second.first, &factor);
          }
          const float ws2 = w->weight_scale_2;
          *w = it->second.second;
          // Keep each expert's own per-tensor scale unless the fault drops it.
          if (!(s_->has(FaultKind::NoBlockScale) && w->kind == SchemeKind::FP8)) w->weight_scale_2 = ws2;
        }
    inner_->run(x, s_->rows(m), l, y, sem);
    finish(y, m, layer.router.k, *s_, factor);
  }

 private:
  const MoeKernel* inner_;
  State* s_;
};

class FaultyAttention final : public AttentionKernel {
 public:
  FaultyAttention(const AttentionKernel* inner, State* s) : inner_(inner), s_(s) {}
  void run(const AttentionArgs& args) const override {
    AttentionArgs a = args;
    std::optional<PagedKvCopy> swapped;
    if (s_->has(FaultKind::NibbleSwap)) {
      // Gather the cache, swap neighbouring key elements (a kernel mixing up element order), re-page.
      const std::int64_t tokens = a.past + a.m, row = a.num_kv_heads * a.head_dim;
      std::vector<float> k(static_cast<std::size_t>(tokens * row)), v(k.size());
      const KvBlockSide keys{a.k_offset, a.block_tokens, a.num_kv_heads, a.head_dim};
      const KvBlockSide values{a.v_offset, a.block_tokens, a.num_kv_heads, a.head_dim};
      for (std::int64_t p = 0; p < tokens; ++p) {
        const std::byte* block = a.kv_blocks[p / a.block_tokens];
        for (std::int64_t j = 0; j < row; ++j) {
          k[static_cast<std::size_t>(p * row + j)] = load_kv_token_element(block, a.kv_dtype, keys, p % a.block_tokens, j);
          v[static_cast<std::size_t>(p * row + j)] = load_kv_token_element(block, a.kv_dtype, values, p % a.block_tokens, j);
        }
      }
      for (std::size_t i = 0; i + 1 < k.size(); i += 2) std::swap(k[i], k[i + 1]);
      swapped.emplace(k.data(), v.data(), tokens, a.num_kv_heads, a.head_dim, a.block_tokens, 3, 1, 1, a.kv_dtype);
      swapped->point(a);
    }
    if (s_->has(FaultKind::NoBlockScale)) a.scale = 1.0f;
    a.m = s_->rows(args.m);
    inner_->run(a);
    finish(args.out, args.m, args.num_heads * args.head_dim, *s_, 1.0f);
  }

 private:
  const AttentionKernel* inner_;
  State* s_;
};

// Linear attention: nibble-swap reads the conv taps in reverse order and the delta rule's keys
// with neighbouring elements exchanged; no-block-scale doubles the conv output (a dropped 0.5)
// and ignores the delta rule's decay. tail runs only the steps of the full M tiles, so the state
// is wrong as well.
class FaultyConv1d final : public Conv1dKernel {
 public:
  FaultyConv1d(const Conv1dKernel* inner, State* s) : inner_(inner), s_(s) {}
  void run(const Conv1dArgs& args) const override {
    Conv1dArgs a = args;
    std::vector<float> reversed;
    if (s_->has(FaultKind::NibbleSwap)) {
      reversed.resize(static_cast<std::size_t>(a.kernel * a.channels));
      for (std::int64_t j = 0; j < a.kernel; ++j)
        std::copy(args.weight + (a.kernel - 1 - j) * a.channels, args.weight + (a.kernel - j) * a.channels,
                  reversed.begin() + j * a.channels);
      a.weight = reversed.data();
    }
    a.m = s_->rows(args.m);
    inner_->run(a);
    finish(args.out, args.m, args.channels, *s_, s_->has(FaultKind::NoBlockScale) ? 2.0f : 1.0f);
  }

 private:
  const Conv1dKernel* inner_;
  State* s_;
};

class FaultyDeltaRule final : public DeltaRuleKernel {
 public:
  FaultyDeltaRule(const DeltaRuleKernel* inner, State* s) : inner_(inner), s_(s) {}
  void run(const DeltaRuleArgs& args) const override {
    DeltaRuleArgs a = args;
    std::vector<float> k, g;
    if (s_->has(FaultKind::NibbleSwap)) {
      k.assign(args.k, args.k + args.m * args.num_k_heads * args.dk);
      for (std::size_t i = 0; i + 1 < k.size(); i += 2) std::swap(k[i], k[i + 1]);
      a.k = k.data();
    }
    if (s_->has(FaultKind::NoBlockScale)) {
      g.assign(static_cast<std::size_t>(args.m * args.num_v_heads), 0.0f);
      a.g = g.data();
    }
    a.m = s_->rows(args.m);
    inner_->run(a);
    finish(args.out, args.m, args.num_v_heads * args.dv, *s_, 1.0f);
  }

 private:
  const DeltaRuleKernel* inner_;
  State* s_;
};

struct Holder final : FaultHolder {
  State state;
  std::unique_ptr<GemmKernel> gemm;
  std::unique_ptr<MoeKernel> moe;
  std::unique_ptr<AttentionKernel> attention;
  std::unique_ptr<Conv1dKernel> conv1d;
  std::unique_ptr<DeltaRuleKernel> delta_rule;
};

}  // namespace

std::string_view fault_kind_name(FaultKind kind) {
  for (const auto& [k, n] : kKinds)
    if (k == kind) return n;
  return "?";
}

std::string FaultSpec::text() const {
  std::string s = backend;
  if (family) s += "/" + std::string(family_name(*family));
  s += ":" + std::string(fault_kind_name(kind));
  if (kind == FaultKind::LateNan && after_calls > 0) s += ":" + std::to_string(after_calls);
  return s;
}

std::vector<FaultSpec> parse_fault_specs(std::string_view text) {
  std::vector<FaultSpec> out;
  for (std::string_view entry : split(text, ',')) {
    if (entry.empty()) continue;
    const auto parts = split(entry, ':');
    auto bad = [&](const std::string& why) {
      fail("FP4SERVE_INJECT_FAULT entry '", entry, "': ", why,
           " (expected <backend>[/<family>]:<kind>[:<calls>], kinds: ", known_kinds(), ")");
    };
    if (parts.size() < 2 || parts.size() > 3) bad("wrong number of ':' fields");
    FaultSpec spec;
    const auto slash = parts[0].find('/');
    spec.backend = std::string(parts[0].substr(0, slash));
    if (find_backend(spec.backend) == nullptr) bad("no backend named '" + spec.backend + "' is compiled in");
    if (slash != std::string_view::npos) {
      const std::string_view fam = parts[0].substr(slash + 1);
      for (OpFamily f : {OpFamily::DenseGemm, OpFamily::Fp4Gemm, OpFamily::Moe, OpFamily::Attention,
                         OpFamily::LinearAttention})
        if (family_name(f) == fam) spec.family = f;
      if (!spec.family)
        bad("unknown family '" + std::string(fam) + "' (dense, fp4-gemm, moe, attention, linear-attention)");
    }
    bool found = false;
    for (const auto& [k, n] : kKinds)
      if (n == parts[1]) {
        spec.kind = k;
        found = true;
      }
    if (!found) bad("unknown kind '" + std::string(parts[1]) + "'");
    if (parts.size() == 3) {
      if (spec.kind != FaultKind::LateNan) bad("only late-nan takes a call count");
      const std::string n(parts[2]);
      char* end = nullptr;
      const long long v = std::strtoll(n.c_str(), &end, 10);
      if (n.empty() || *end != '\0' || v < 0) bad("call count '" + n + "' is not a non-negative integer");
      spec.after_calls = v;
    }
    out.push_back(std::move(spec));
  }
  return out;
}

std::vector<FaultSpec> faults_for(const std::vector<FaultSpec>& specs, std::string_view backend, OpFamily family) {
  std::vector<FaultSpec> out;
  for (const auto& s : specs)
    if (s.backend == backend && (!s.family || *s.family == family)) out.push_back(s);
  return out;
}

ValidationScope::ValidationScope() { ++tl_validation_depth; }
ValidationScope::~ValidationScope() { --tl_validation_depth; }
bool ValidationScope::active() { return tl_validation_depth > 0; }

FamilyImpl wrap_with_faults(const FamilyImpl& impl, OpFamily, const std::vector<FaultSpec>& faults,
                            std::unique_ptr<FaultHolder>& holder) {
  if (faults.empty() || !impl.present()) return impl;
  auto h = std::make_unique<Holder>();
  h->state.faults = faults;
  h->state.m_tile = impl.m_tile;
  FamilyImpl out = impl;
  if (impl.gemm) {
    h->gemm = std::make_unique<FaultyGemm>(impl.gemm, &h->state);
    out.gemm = h->gemm.get();
  }
  if (impl.moe) {
    h->moe = std::make_unique<FaultyMoe>(impl.moe, &h->state);
    out.moe = h->moe.get();
  }
  if (impl.attention) {
    h->attention = std::make_unique<FaultyAttention>(impl.attention, &h->state);
    out.attention = h->attention.get();
  }
  if (impl.conv1d) {
    h->conv1d = std::make_unique<FaultyConv1d>(impl.conv1d, &h->state);
    out.conv1d = h->conv1d.get();
  }
  if (impl.delta_rule) {
    h->delta_rule = std::make_unique<FaultyDeltaRule>(impl.delta_rule, &h->state);
    out.delta_rule = h->delta_rule.get();
  }
  holder = std::move(h);
  return out;
}

}  // namespace fp4serve::kernels
