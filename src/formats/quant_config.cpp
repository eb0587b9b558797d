#include "formats/quant_config.h"

#include <algorithm>
#include <cctype>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <unordered_map>

#include "util/error.h"

namespace fp4serve {

using nlohmann::json;

namespace {

constexpr std::string_view kSupportedModelOptAlgos = "NVFP4, W4A16_NVFP4, FP8, MIXED_PRECISION";
constexpr std::string_view kSupportedCtFormats = "nvfp4-pack-quantized, float-quantized";

std::string upper(std::string s) {
  for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return s;
}
std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// ---------------------------------------------------------------------------------------------
// Pattern matching

bool has_wildcard(std::string_view p) {
  return p.find_first_of("*?[") != std::string_view::npos;
}

// One fnmatch character class starting at p[i] == '['. Returns false when malformed (then '['
// is literal). On success sets `matched` and `next` (index after ']').
bool match_class(std::string_view p, std::size_t i, char c, bool& matched, std::size_t& next) {
  std::size_t j = i + 1;
  bool negate = false;
  if (j < p.size() && (p[j] == '!' || p[j] == '^')) {
    negate = true;
    ++j;
  }
  std::size_t first = j;
  bool found = false;
  while (j < p.size() && (p[j] != ']' || j == first)) {
    if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
      if (p[j] <= c && c <= p[j + 2]) found = true;
      j += 3;
    } else {
      if (p[j] == c) found = true;
      ++j;
    }
  }
  if (j >= p.size()) return false;
  matched = found != negate;
  next = j + 1;
  return true;
}

// Python fnmatch.fnmatchcase: `*` any run (dots included), `?` one character, `[...]` a class.
bool glob(std::string_view p, std::string_view s) {
  std::size_t pi = 0, si = 0;
  std::size_t star_p = std::string_view::npos, star_s = 0;
  while (si < s.size()) {
    if (pi < p.size() && p[pi] == '*') {
      star_p = pi++;
      star_s = si;
      continue;
    }
    if (pi < p.size()) {
      bool ok = false;
      std::size_t next = pi + 1;
      if (p[pi] == '?') {
        ok = true;
      } else if (p[pi] == '[') {
        bool matched = false;
        if (match_class(p, pi, s[si], matched, next)) {
          ok = matched;
        } else {
          ok = s[si] == '[';
          next = pi + 1;
        }
      } else {
        ok = p[pi] == s[si];
      }
      if (ok) {
        pi = next;
        ++si;
        continue;
      }
    }
    if (star_p == std::string_view::npos) return false;
    pi = star_p + 1;
    si = ++star_s;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

const std::regex& compiled_regex(const std::string& body) {
  thread_local std::unordered_map<std::string, std::regex> cache;
  auto it = cache.find(body);
  if (it == cache.end()) {
    try {
      it = cache.emplace(body, std::regex(body, std::regex::ECMAScript)).first;
    } catch (const std::regex_error& e) {
      fail("invalid regular expression in pattern 're:", body, "': ", e.what());
    }
  }
  return it->second;
}

bool match_variant(std::string_view pattern, std::string_view name) {
  if (pattern.empty()) return false;
  if (pattern.substr(0, 3) == "re:") {
    const std::regex& re = compiled_regex(std::string(pattern.substr(3)));
    std::string s(name);
    return std::regex_search(s, re, std::regex_constants::match_continuous);
  }
  // ModelOpt's summarized prefix "x*": exactly x or something under x.
  const bool prefix_star = pattern.size() >= 2 && pattern.back() == '*' && pattern[pattern.size() - 2] != '.' &&
                           !has_wildcard(pattern.substr(0, pattern.size() - 1));
  std::string_view literal = prefix_star ? pattern.substr(0, pattern.size() - 1) : pattern;
  // Cheap rejection: the name must start with the pattern's literal head.
  std::size_t head = pattern.find_first_of("*?[");
  std::string_view lit_head = pattern.substr(0, head == std::string_view::npos ? pattern.size() : head);
  if (name.substr(0, lit_head.size()) != lit_head) return false;
  if (prefix_star) {
    return name == literal ||
           (name.size() > literal.size() && name.substr(0, literal.size()) == literal && name[literal.size()] == '.');
  }
  // A glob ending in '*' that matches an ancestor also matches the name itself.
  if (pattern.back() == '*') return glob(pattern, name);
  // The name itself, then each ancestor ("a.b.c" -> "a.b" -> "a"); a candidate must end with the
  // pattern's literal tail (skipped for patterns with character classes).
  std::size_t last = pattern.find_last_of("*?]");
  std::string_view tail = pattern.find('[') != std::string_view::npos || last == std::string_view::npos
                              ? std::string_view{}
                              : pattern.substr(last + 1);
  std::string_view cur = name;
  while (true) {
    if (cur.size() >= tail.size() && cur.substr(cur.size() - tail.size()) == tail && glob(pattern, cur)) return true;
    std::size_t dot = cur.rfind('.');
    if (dot == std::string_view::npos) return false;
    cur = cur.substr(0, dot);
  }
}

// "x" and "x*" (x a literal not ending in '.') both mean "x and everything under it".
std::optional<std::string_view> subtree_literal(std::string_view pattern) {
  if (pattern.empty() || pattern.substr(0, 3) == "re:") return std::nullopt;
  if (!has_wildcard(pattern)) return pattern;
  if (pattern.size() >= 2 && pattern.back() == '*' && pattern[pattern.size() - 2] != '.' &&
      !has_wildcard(pattern.substr(0, pattern.size() - 1))) {
    return pattern.substr(0, pattern.size() - 1);
  }
  return std::nullopt;
}

struct StringHash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

}  // namespace

namespace detail {
struct PatternIndex {
  std::vector<std::string> patterns;  // the list it was built from
  // Subtree literals -> index of the first pattern spelling them.
  std::unordered_map<std::string, std::size_t, StringHash, std::equal_to<>> subtree;
  std::vector<std::size_t> others;  // globs and regexes, ascending
};
}  // namespace detail

namespace {

std::shared_ptr<const detail::PatternIndex> build_index(const std::vector<std::string>& patterns) {
  auto index = std::make_shared<detail::PatternIndex>();
  index->patterns = patterns;
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    if (auto lit = subtree_literal(patterns[i])) {
      index->subtree.emplace(std::string(*lit), i);  // keeps the first
    } else if (!patterns[i].empty()) {
      index->others.push_back(i);
    }
  }
  return index;
}

// Index (into index.patterns) of the first pattern covering one of `names`, or npos.
std::size_t first_match(const detail::PatternIndex& index, const std::vector<std::string>& names) {
  std::size_t best = std::string::npos;
  if (!index.subtree.empty()) {
    for (const std::string& name : names) {
      std::string_view cur = name;
      while (true) {
        auto it = index.subtree.find(cur);
        if (it != index.subtree.end()) best = std::min(best, it->second);
        std::size_t dot = cur.rfind('.');
        if (dot == std::string_view::npos) break;
        cur = cur.substr(0, dot);
      }
    }
  }
  for (std::size_t i : index.others) {
    if (i >= best) break;
    for (const std::string& name : names) {
      if (match_variant(index.patterns[i], name)) return i;
    }
  }
  return best;
}

// ---------------------------------------------------------------------------------------------
// JSON helpers

struct Where {
  std::string_view file;
  std::string prefix;  // e.g. "quantization_config."

  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    fail(file, ": field '", prefix, key, "' ", what);
  }
  Where sub(const std::string& key) const { return Where{file, prefix + key + "."}; }
};

const json* get(const json& obj, const std::string& key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

std::optional<std::string> opt_string(const json& obj, const Where& w, const std::string& key) {
  const json* v = get(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) w.bad(key, std::string("must be a string, got ") + v->type_name() + " " + v->dump());
  return v->get<std::string>();
}

const json* opt_object(const json& obj, const Where& w, const std::string& key) {
  const json* v = get(obj, key);
  if (v && !v->is_object()) w.bad(key, std::string("must be an object, got ") + v->type_name());
  return v;
}

std::vector<std::string> string_list(const json& obj, const Where& w, const std::string& key) {
  std::vector<std::string> out;
  const json* v = get(obj, key);
  if (!v) return out;
  if (!v->is_array()) w.bad(key, std::string("must be a list of strings, got ") + v->type_name());
  for (std::size_t i = 0; i < v->size(); ++i) {
    const json& e = (*v)[i];
    if (!e.is_string()) {
      w.bad(key + "[" + std::to_string(i) + "]", std::string("must be a string, got ") + e.type_name());
    }
    out.push_back(e.get<std::string>());
  }
  return out;
}

std::optional<std::int64_t> opt_int(const json& obj, const Where& w, const std::string& key) {
  const json* v = get(obj, key);
  if (!v) return std::nullopt;
  if (v->is_number_integer() || v->is_number_unsigned()) return v->get<std::int64_t>();
  if (v->is_string()) {  // vLLM accepts "16"
    const std::string& s = v->get_ref<const std::string&>();
    try {
      std::size_t used = 0;
      long long n = std::stoll(s, &used);
      if (used == s.size()) return n;
    } catch (const std::exception&) {
    }
  }
  w.bad(key, std::string("must be an integer, got ") + v->type_name() + " " + v->dump());
}

void check_patterns(const std::vector<std::string>& patterns, const Where& w, const std::string& key) {
  for (std::size_t i = 0; i < patterns.size(); ++i) {
    const std::string& p = patterns[i];
    if (p.substr(0, 3) == "re:") {
      try {
        (void)compiled_regex(p.substr(3));
      } catch (const Error& e) {
        w.bad(key + "[" + std::to_string(i) + "]", e.what());
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// ModelOpt

ModuleQuantDecl modelopt_decl(const std::string& algo, std::optional<std::int64_t> group_size, const Where& w,
                              const std::string& key) {
  ModuleQuantDecl d;
  if (algo == "NVFP4" || algo == "W4A16_NVFP4") {
    d.weight = WeightFormat::NVFP4;
    d.activations_quantized = algo == "NVFP4";
    d.group_size = group_size.value_or(16);
    if (d.group_size != 16) {
      w.bad("group_size", "is " + std::to_string(d.group_size) + "; NVFP4 uses blocks of 16");
    }
    return d;
  }
  if (algo == "FP8") {
    d.weight = WeightFormat::FP8;
    d.activations_quantized = true;
    return d;
  }
  w.bad(key, "is '" + algo + "', which is not supported (supported: " + std::string(kSupportedModelOptAlgos) + ")");
}

// The ModelOpt body: either hf_quant_config.json's "quantization" object or the flat
// config.json quantization_config. `flat` selects the key names.
QuantConfig parse_modelopt_body(const json& body, const Where& w, bool flat) {
  QuantConfig qc;
  qc.producer = QuantProducer::ModelOpt;
  qc.source = std::string(w.file);
  std::optional<std::string> algo = opt_string(body, w, "quant_algo");
  if (!algo || algo->empty()) w.bad("quant_algo", "is required but missing");
  qc.quant_algo = upper(*algo);
  std::optional<std::int64_t> group_size = opt_int(body, w, "group_size");

  if (flat) {
    qc.ignore = string_list(body, w, get(body, "ignore") ? "ignore" : "exclude_modules");
    check_patterns(qc.ignore, w, get(body, "ignore") ? "ignore" : "exclude_modules");
    if (!group_size) {
      // Take it from config_groups.*.weights.group_size when the flat form has it there.
      if (const json* groups = opt_object(body, w, "config_groups")) {
        for (const auto& [name, g] : groups->items()) {
          if (!g.is_object()) continue;
          const json* weights = get(g, "weights");
          if (weights && weights->is_object()) {
            Where gw = w.sub("config_groups").sub(name).sub("weights");
            if (auto gs = opt_int(*weights, gw, "group_size")) group_size = gs;
          }
        }
      }
    }
    if (const json* kv = get(body, "kv_cache_scheme")) {
      if (!kv->is_object()) w.bad("kv_cache_scheme", std::string("must be an object, got ") + kv->type_name());
      const json* bits = get(*kv, "num_bits");
      const json* type = get(*kv, "type");
      if (bits && type && *bits == 8 && *type == "float") {
        qc.kv_cache_quant_algo = "FP8";
      } else {
        qc.kv_cache_quant_algo = "UNKNOWN";
      }
    }
    if (auto kv = opt_string(body, w, "kv_cache_quant_algo")) qc.kv_cache_quant_algo = upper(*kv);
  } else {
    qc.ignore = string_list(body, w, "exclude_modules");
    check_patterns(qc.ignore, w, "exclude_modules");
    if (auto kv = opt_string(body, w, "kv_cache_quant_algo")) qc.kv_cache_quant_algo = upper(*kv);
  }

  if (qc.quant_algo == "MIXED_PRECISION") {
    const json* layers = opt_object(body, w, "quantized_layers");
    if (!layers || layers->empty()) {
      w.bad("quantized_layers", "is required (non-empty) when quant_algo is MIXED_PRECISION");
    }
    for (const auto& [name, entry] : layers->items()) {
      Where ew = w.sub("quantized_layers").sub(name);
      if (!entry.is_object()) {
        w.sub("quantized_layers").bad(name, std::string("must be an object, got ") + entry.type_name());
      }
      std::optional<std::string> layer_algo = opt_string(entry, ew, "quant_algo");
      if (!layer_algo) ew.bad("quant_algo", "is required but missing");
      std::optional<std::int64_t> gs = opt_int(entry, ew, "group_size");
      if (!gs) gs = group_size;
      qc.per_module[name] = modelopt_decl(upper(*layer_algo), gs, ew, "quant_algo");
    }
    qc.default_decl = ModuleQuantDecl{};
  } else {
    qc.default_decl = modelopt_decl(qc.quant_algo, group_size, w, "quant_algo");
  }
  return qc;
}

void read_producer(const json& obj, const Where& w, QuantConfig& qc, bool required_modelopt) {
  const json* producer = opt_object(obj, w, "producer");
  if (!producer) return;
  Where pw = w.sub("producer");
  if (auto name = opt_string(*producer, pw, "name")) {
    if (required_modelopt && lower(*name) != "modelopt") {
      pw.bad("name", "is '" + *name + "'; only ModelOpt's hf_quant_config.json is supported");
    }
  }
  if (auto version = opt_string(*producer, pw, "version")) qc.producer_version = *version;
}

QuantConfig parse_hf_quant_config(const json& doc, std::string_view file) {
  Where w{file, ""};
  if (!doc.is_object()) fail(file, ": expected a JSON object, got ", doc.type_name());
  const json* body = opt_object(doc, w, "quantization");
  if (!body) w.bad("quantization", "is required but missing (expected ModelOpt's {\"quantization\": {...}})");
  QuantConfig qc = parse_modelopt_body(*body, w.sub("quantization"), /*flat=*/false);
  read_producer(doc, w, qc, /*required_modelopt=*/true);
  return qc;
}

// ---------------------------------------------------------------------------------------------
// compressed-tensors

ModuleQuantDecl ct_group_decl(const json& group, const std::string& format, const Where& gw) {
  ModuleQuantDecl d;
  const json* weights = opt_object(group, gw, "weights");
  if (!weights) gw.bad("weights", "is required for format '" + format + "'");
  Where ww = gw.sub("weights");
  std::optional<std::int64_t> bits = opt_int(*weights, ww, "num_bits");
  std::optional<std::string> type = opt_string(*weights, ww, "type");
  const json* acts = get(group, "input_activations");
  if (acts && !acts->is_object()) {
    gw.bad("input_activations", std::string("must be an object or null, got ") + acts->type_name());
  }
  d.activations_quantized = acts != nullptr;
  if (format == "nvfp4-pack-quantized") {
    if (bits != 4 || type.value_or("float") != "float") {
      ww.bad("num_bits", "must be 4 with type 'float' for nvfp4-pack-quantized");
    }
    d.weight = WeightFormat::NVFP4;
    d.group_size = opt_int(*weights, ww, "group_size").value_or(16);
    if (d.group_size != 16) ww.bad("group_size", "is " + std::to_string(d.group_size) + "; NVFP4 uses 16");
    return d;
  }
  if (format == "float-quantized") {
    if (bits != 8 || type.value_or("float") != "float") {
      ww.bad("num_bits", "must be 8 with type 'float' for float-quantized (FP8)");
    }
    std::string strategy = opt_string(*weights, ww, "strategy").value_or("tensor");
    if (strategy != "tensor") {
      ww.bad("strategy", "is '" + strategy + "'; only per-tensor FP8 weights (strategy 'tensor') are supported");
    }
    d.weight = WeightFormat::FP8;
    return d;
  }
  gw.bad("format", "is '" + format + "', which is not supported (supported: " + std::string(kSupportedCtFormats) + ")");
}

QuantConfig parse_compressed_tensors(const json& qcfg, const Where& w) {
  QuantConfig qc;
  qc.producer = QuantProducer::CompressedTensors;
  qc.source = std::string(w.file);
  if (auto version = opt_string(qcfg, w, "version")) qc.producer_version = *version;
  std::optional<std::string> global_format = opt_string(qcfg, w, "format");
  const json* groups = opt_object(qcfg, w, "config_groups");
  if (!groups || groups->empty()) w.bad("config_groups", "is required (non-empty) for compressed-tensors");
  bool have_linear = false;
  std::string first_format;
  for (const auto& [name, group] : groups->items()) {
    Where gw = w.sub("config_groups").sub(name);
    if (!group.is_object()) w.sub("config_groups").bad(name, "must be an object");
    std::optional<std::string> format = opt_string(group, gw, "format");
    if (!format) format = global_format;
    if (!format || *format == "mixed-precision") {
      gw.bad("format", "is missing (and quantization_config.format does not name a single format)");
    }
    if (first_format.empty()) first_format = *format;
    std::vector<std::string> targets = string_list(group, gw, "targets");
    if (targets.empty()) gw.bad("targets", "is required (non-empty)");
    check_patterns(targets, gw, "targets");
    if (*format == "dense") continue;  // an explicitly unquantized group
    ModuleQuantDecl d = ct_group_decl(group, *format, gw);
    for (const std::string& t : targets) {
      if (t == "Linear") {
        if (have_linear) gw.bad("targets", "targets 'Linear' a second time (another group already does)");
        have_linear = true;
        qc.default_decl = d;
      } else {
        qc.pattern_decls.emplace_back(t, d);
      }
    }
  }
  qc.quant_algo = global_format && *global_format != "mixed-precision" ? *global_format : first_format;
  qc.ignore = string_list(qcfg, w, "ignore");
  check_patterns(qc.ignore, w, "ignore");
  if (const json* kv = get(qcfg, "kv_cache_scheme")) {
    if (!kv->is_object()) w.bad("kv_cache_scheme", std::string("must be an object or null, got ") + kv->type_name());
    const json* bits = get(*kv, "num_bits");
    const json* type = get(*kv, "type");
    qc.kv_cache_quant_algo = bits && type && *bits == 8 && *type == "float" ? "FP8" : "UNKNOWN";
  }
  return qc;
}

QuantConfig parse_config_json_quant(const json& doc, std::string_view file) {
  Where top{file, ""};
  if (!doc.is_object()) fail(file, ": expected a JSON object, got ", doc.type_name());
  const json* qcfg = opt_object(doc, top, "quantization_config");
  if (!qcfg) return QuantConfig{};
  Where w = top.sub("quantization_config");
  std::optional<std::string> method = opt_string(*qcfg, w, "quant_method");
  if (!method) w.bad("quant_method", "is required but missing");
  std::string m = lower(*method);
  if (m.rfind("modelopt", 0) == 0) {
    QuantConfig qc;
    if (const json* nested = opt_object(*qcfg, w, "quantization")) {
      qc = parse_modelopt_body(*nested, w.sub("quantization"), /*flat=*/false);
    } else {
      qc = parse_modelopt_body(*qcfg, w, /*flat=*/true);
    }
    read_producer(*qcfg, w, qc, /*required_modelopt=*/false);
    return qc;
  }
  if (m == "compressed-tensors" || m == "compressed_tensors") return parse_compressed_tensors(*qcfg, w);
  w.bad("quant_method", "is '" + *method + "', which is not supported (supported: modelopt, compressed-tensors)");
}

std::string describe_decl(const ModuleQuantDecl& d) {
  switch (d.weight) {
    case WeightFormat::NVFP4: return d.activations_quantized ? "NVFP4" : "W4A16_NVFP4";
    case WeightFormat::FP8: return "FP8";
    case WeightFormat::Unquantized: break;
  }
  return "unquantized";
}

bool same_decl(const ModuleQuantDecl& a, const ModuleQuantDecl& b) {
  return a.weight == b.weight && a.activations_quantized == b.activations_quantized && a.group_size == b.group_size;
}

json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path.string(), ": cannot open");
  std::ostringstream text;
  text << in.rdbuf();
  try {
    return json::parse(text.str());
  } catch (const json::exception& e) {
    fail(path.string(), ": invalid JSON: ", e.what());
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------

std::vector<std::string> module_name_variants(std::string_view module) {
  static constexpr std::string_view kPrefixes[] = {"model.language_model.", "language_model.model.", "language_model.",
                                                   "model."};
  std::string_view core = module;
  for (std::string_view p : kPrefixes) {
    if (module.substr(0, p.size()) == p) {
      core = module.substr(p.size());
      break;
    }
  }
  std::vector<std::string> out;
  auto add = [&](std::string s) {
    if (std::find(out.begin(), out.end(), s) == out.end()) out.push_back(std::move(s));
  };
  add(std::string(module));
  add(std::string(core));
  for (std::string_view p : kPrefixes) add(std::string(p) + std::string(core));
  return out;
}

bool module_pattern_matches(std::string_view pattern, std::string_view module) {
  for (const std::string& name : module_name_variants(module)) {
    if (match_variant(pattern, name)) return true;
  }
  return false;
}

const std::string* QuantConfig::ignore_match(std::string_view module) const {
  if (ignore.empty()) return nullptr;
  std::vector<std::string> names = module_name_variants(module);
  std::shared_ptr<const detail::PatternIndex> index = ignore_index;
  if (!index || index->patterns != ignore) index = build_index(ignore);  // edited since parsing
  std::size_t i = first_match(*index, names);
  return i == std::string::npos ? nullptr : &ignore[i];
}

bool QuantConfig::is_ignored(std::string_view module) const {
  return ignore_match(module) != nullptr;
}

ModuleQuantDecl QuantConfig::decl_for(std::string_view module) const {
  if (producer == QuantProducer::None || is_ignored(module)) return ModuleQuantDecl{};
  if (!per_module.empty()) {
    // Exact entry for the module (any prefix spelling), else for its nearest ancestor.
    std::string key;
    for (const std::string& name : module_name_variants(module)) {
      std::string_view cur = name;
      while (true) {
        key.assign(cur);
        auto it = per_module.find(key);
        if (it != per_module.end()) return it->second;
        std::size_t dot = cur.rfind('.');
        if (dot == std::string_view::npos) break;
        cur = cur.substr(0, dot);
      }
    }
  }
  for (const auto& [pattern, decl] : pattern_decls) {
    if (module_pattern_matches(pattern, module)) return decl;
  }
  return default_decl;
}

namespace {
QuantConfig parse_quant_config_impl(const json* hf_quant_config, std::string_view hf_name, const json* config_json,
                                    std::string_view config_name) {
  std::optional<QuantConfig> from_hf;
  std::optional<QuantConfig> from_cfg;
  if (hf_quant_config) from_hf = parse_hf_quant_config(*hf_quant_config, hf_name);
  if (config_json) {
    QuantConfig qc = parse_config_json_quant(*config_json, config_name);
    if (qc.producer != QuantProducer::None) from_cfg = std::move(qc);
  }
  if (!from_hf && !from_cfg) return QuantConfig{};
  if (!from_hf) return *from_cfg;
  if (!from_cfg) return *from_hf;

  // Both present: they must describe the same quantization.
  const QuantConfig& a = *from_hf;
  const QuantConfig& b = *from_cfg;
  if (b.producer != QuantProducer::ModelOpt) {
    fail(hf_name, " (ModelOpt) and ", config_name,
         " (quantization_config.quant_method compressed-tensors) both describe the quantization; remove the "
         "stale one");
  }
  if (a.quant_algo != b.quant_algo) {
    fail(hf_name, " says quant_algo ", a.quant_algo, " but ", config_name, " quantization_config says ", b.quant_algo,
         "; the two files contradict each other");
  }
  std::set<std::string> sa(a.ignore.begin(), a.ignore.end());
  std::set<std::string> sb(b.ignore.begin(), b.ignore.end());
  if (sa != sb) {
    for (const std::string& p : sa) {
      if (!sb.count(p)) {
        fail(hf_name, " excludes '", p, "' but ", config_name,
             " quantization_config.ignore does not; the exclude lists of the two files contradict each other");
      }
    }
    for (const std::string& p : sb) {
      if (!sa.count(p)) {
        fail(config_name, " quantization_config.ignore has '", p, "' but ", hf_name,
             " exclude_modules does not; the exclude lists of the two files contradict each other");
      }
    }
  }
  if (!same_decl(a.default_decl, b.default_decl)) {
    fail(hf_name, " declares ", describe_decl(a.default_decl), " but ", config_name, " declares ",
         describe_decl(b.default_decl), "; the two files contradict each other");
  }
  for (const auto& [name, decl] : a.per_module) {
    auto it = b.per_module.find(name);
    if (it == b.per_module.end() || !same_decl(decl, it->second)) {
      fail(hf_name, " quantized_layers['", name, "'] is ", describe_decl(decl), " but ", config_name, " has ",
           it == b.per_module.end() ? std::string("no entry") : describe_decl(it->second),
           "; the two files contradict each other");
    }
  }
  for (const auto& [name, decl] : b.per_module) {
    if (!a.per_module.count(name)) {
      fail(config_name, " quantized_layers['", name, "'] is ", describe_decl(decl), " but ", hf_name,
           " has no entry; the two files contradict each other");
    }
  }
  if (!a.kv_cache_quant_algo.empty() && !b.kv_cache_quant_algo.empty() &&
      a.kv_cache_quant_algo != b.kv_cache_quant_algo) {
    fail(hf_name, " says kv_cache_quant_algo ", a.kv_cache_quant_algo, " but ", config_name, " says ",
         b.kv_cache_quant_algo, "; the two files contradict each other");
  }
  QuantConfig merged = b;
  if (merged.producer_version.empty()) merged.producer_version = a.producer_version;
  if (merged.kv_cache_quant_algo.empty()) merged.kv_cache_quant_algo = a.kv_cache_quant_algo;
  merged.source = std::string(hf_name) + " and " + std::string(config_name);
  return merged;
}
}  // namespace

QuantConfig parse_quant_config(const json* hf_quant_config, std::string_view hf_name, const json* config_json,
                               std::string_view config_name) {
  QuantConfig qc = parse_quant_config_impl(hf_quant_config, hf_name, config_json, config_name);
  if (!qc.ignore.empty()) qc.ignore_index = build_index(qc.ignore);
  return qc;
}

QuantConfig parse_quant_config(const json* hf_quant_config, const json* config_json, std::string_view source) {
  std::string dir(source);
  std::string hf_name = dir.empty() ? "hf_quant_config.json" : dir + "/hf_quant_config.json";
  std::string cfg_name = dir.empty() ? "config.json" : dir + "/config.json";
  return parse_quant_config(hf_quant_config, hf_name, config_json, cfg_name);
}

QuantConfig load_quant_config(const std::filesystem::path& model_dir) {
  std::filesystem::path hf_path = model_dir / "hf_quant_config.json";
  std::filesystem::path cfg_path = model_dir / "config.json";
  std::optional<json> hf;
  std::optional<json> cfg;
  if (std::filesystem::exists(hf_path)) hf = read_json(hf_path);
  if (std::filesystem::exists(cfg_path)) cfg = read_json(cfg_path);
  return parse_quant_config(hf ? &*hf : nullptr, hf_path.string(), cfg ? &*cfg : nullptr, cfg_path.string());
}

}  // namespace fp4serve
