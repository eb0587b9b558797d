#include "synth/synth_checkpoint.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <stdlib.h>
#include <thread>
#include <vector>

#include "formats/quant_config.h"
#include "formats/safetensors_writer.h"
#include "model/weight_layout.h"
#include "numerics/nvfp4.h"
#include "numerics/scalar_formats.h"
#include "synth/random_weights.h"
#include "util/error.h"
#include "util/progress_bar.h"

namespace fp4serve::synth {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr std::int64_t kQwen3TokenizerIds = 151669;  // 151643 BPE tokens + 26 added tokens
constexpr std::uint64_t kSmallTensorBytes = 64 << 10;
constexpr std::int64_t kChunkElements = 4 << 20;  // BF16 tensors are generated in chunks of this many
// No calibration data exists for a random model, so the static activation scale assumes an
// activation amax of 16 (inputs are RMS-normalised, so |x| stays well below that).
constexpr float kAssumedActivationAmax = 16.0f;

// A run of consecutive parameters that share per-tensor scales when quantized, as ModelOpt's
// export forces for modules reading the same input: q/k/v, and gate/up.
struct Unit {
  std::vector<const ParamSpec*> params;
  bool quantized = false;
  std::uint64_t bytes = 0;
};

// One piece of output, written in order: bytes, or a hole of `hole` zero bytes.
struct Piece {
  std::vector<std::uint8_t> bytes;
  std::uint64_t hole = 0;
};

// A unit, or one row-chunk of a large BF16 tensor: the unit of parallel work.
struct WorkItem {
  const Unit* unit = nullptr;
  std::int64_t row_begin = 0, row_end = 0;  // for a BF16 chunk
  std::uint64_t chunk_index = 0;
  std::uint64_t bytes = 0;
};

std::int64_t numel(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto d : shape) n *= d;
  return n;
}

bool ends_with(const std::string& s, const char* suffix) { return s.ends_with(suffix); }

// How one parameter's random values are drawn: normal(a, b) (mean, stddev) or uniform in [a, b)
// with the log taken (log_uniform).
struct Init {
  bool log_uniform = false;
  float a = 0.0f, b = 1.0f;
};

// Initialisation that keeps a random model numerically sane: unit-RMS embeddings, Linear
// weights with std 1/sqrt(in) so outputs keep unit RMS, residual outputs shrunk by
// 1/sqrt(2 * layers) so the residual stream grows slowly, norm gains near neutral (1, or 0
// where the model applies 1 + w). Gated DeltaNet: A_log = log(uniform(1, 16)) as transformers
// initialises it (per-head decay rates exp(A) between 1 and 16), dt_bias small around 0, conv
// taps with std 1/sqrt(kernel) so the conv keeps unit RMS.
Init init_of(const ModelConfig& c, const ParamSpec& p) {
  switch (p.kind) {
    case ParamKind::Embedding: return {false, 0.0f, 1.0f};
    case ParamKind::NormGain: return {false, p.zero_centered ? 0.0f : 1.0f, 0.05f};
    case ParamKind::Linear: {
      float stddev = 1.0f / std::sqrt(static_cast<float>(p.shape[1]));
      if (p.residual_output) stddev /= std::sqrt(2.0f * static_cast<float>(c.num_hidden_layers));
      return {false, 0.0f, stddev};
    }
    case ParamKind::Conv1d: return {false, 0.0f, 1.0f / std::sqrt(static_cast<float>(p.shape.back()))};
    case ParamKind::Vector:
      if (p.module.ends_with("A_log")) return {true, 1.0f, 16.0f};
      return {false, 0.0f, 0.1f};  // dt_bias
  }
  return {};
}

void draw(const Init& init, std::uint64_t stream, std::span<float> out) {
  if (!init.log_uniform) return fill_normal(stream, init.a, init.b, out);
  fill_uniform(stream, init.a, init.b, out);
  for (float& v : out) v = std::log(v);
}

// The largest |value| draw() can produce: fill_normal never exceeds sqrt(12) stddevs.
float bound_of(const Init& init) {
  constexpr float kIrwinHallBound = 3.4641016f;
  if (init.log_uniform) return std::max(std::fabs(std::log(init.a)), std::fabs(std::log(init.b)));
  return std::fabs(init.a) + kIrwinHallBound * init.b;
}

std::vector<TensorDecl> tensor_decls(const ParamSpec& p, bool quantized, WeightFormat format) {
  if (!quantized) return {{p.tensor_name(), DType::BF16, p.shape}};
  const std::int64_t out = p.shape[0], in = p.shape[1];
  if (format == WeightFormat::CompressedTensorsNvfp4)
    return {{p.module + ".weight_packed", DType::U8, {out, in / 2}},
            {p.module + ".weight_scale", DType::F8_E4M3, {out, in / nvfp4::kBlock}},
            {p.module + ".weight_global_scale", DType::F32, {1}},
            {p.module + ".input_global_scale", DType::F32, {1}}};
  return {{p.module + ".weight", DType::U8, {out, in / 2}},
          {p.module + ".weight_scale", DType::F8_E4M3, {out, in / nvfp4::kBlock}},
          {p.module + ".weight_scale_2", DType::F32, {}},
          {p.module + ".input_scale", DType::F32, {}}};
}

std::vector<Unit> plan_units(const ModelConfig& c, const std::vector<ParamSpec>& layout, WeightFormat format,
                             QuantScope scope) {
  // Decided by the parser the loader uses, over the ModelOpt exclude list this checkpoint's
  // config will carry: its pattern index keeps ~100k expert modules x ~200 patterns fast.
  const nlohmann::json hf = hf_quant_config_json(c, scope);
  const QuantConfig qc = parse_quant_config(&hf, "hf_quant_config.json", nullptr, "config.json");
  auto is_quantized = [&](const ParamSpec& p) {
    return format != WeightFormat::BF16 && p.kind == ParamKind::Linear && !qc.is_ignored(p.module);
  };
  std::vector<Unit> units;
  for (std::size_t i = 0; i < layout.size();) {
    const ParamSpec& p = layout[i];
    std::size_t group = 1;
    if (ends_with(p.module, "q_proj")) group = 3;             // q, k, v
    else if (ends_with(p.module, "gate_proj")) group = 2;      // gate, up
    else if (ends_with(p.module, "in_proj_qkv")) group = 2;    // Qwen3.5 qkv, z: one fused GEMM in serving engines
    Unit unit;
    unit.quantized = is_quantized(p);
    for (std::size_t j = i + 1; j < i + group; ++j)
      if (j >= layout.size() || !is_quantized(layout[j])) group = 1;
    if (!unit.quantized) group = 1;
    for (std::size_t j = i; j < i + group && j < layout.size(); ++j) {
      unit.params.push_back(&layout[j]);
      for (const auto& d : tensor_decls(layout[j], unit.quantized, format)) unit.bytes += tensor_nbytes(d);
    }
    i += unit.params.size();
    units.push_back(std::move(unit));
  }
  for (const auto& p : layout) {
    if (format == WeightFormat::BF16 || p.kind != ParamKind::Linear || !is_quantized(p)) continue;
    if (p.shape[1] % nvfp4::kBlock != 0)
      fail("synth: ", p.module, " has in_features ", p.shape[1], ", which NVFP4 needs to be a multiple of ",
           nvfp4::kBlock, " (change the shape overrides or use --format bf16)");
  }
  return units;
}

void append_f32(std::vector<std::uint8_t>& out, float v) {
  const std::size_t at = out.size();
  out.resize(at + 4);
  std::memcpy(out.data() + at, &v, 4);  // safetensors is little-endian, like x86-64
}

// The per-tensor scale as each producer stores it: ModelOpt a dequant multiplier (amax/2688),
// compressed-tensors its inverse (2688/amax, computed its own way), which it also quantizes with.
float stored_global_scale(WeightFormat format, float amax) {
  return format == WeightFormat::CompressedTensorsNvfp4 ? nvfp4::ct_global_scale_from_amax(amax)
                                                        : nvfp4::global_scale_from_amax(amax);
}

std::vector<Piece> make_quantized_unit(const SynthOptions& o, const Unit& unit) {
  // Shared per-tensor scale: amax over all members, as ModelOpt's fused export computes it.
  // Uninitialised buffers: every element is drawn, so zero-filling them first is wasted time.
  std::vector<std::unique_ptr<float[]>> buffers(unit.params.size());
  std::vector<std::span<float>> values(unit.params.size());
  float amax = 0.0f;
  for (std::size_t i = 0; i < unit.params.size(); ++i) {
    const ParamSpec& p = *unit.params[i];
    const auto n = static_cast<std::size_t>(numel(p.shape));
    buffers[i] = std::make_unique_for_overwrite<float[]>(n);
    values[i] = {buffers[i].get(), n};
    draw(init_of(o.config, p), stream_seed(o.seed, p.module), values[i]);
    amax = std::max(amax, nvfp4::amax(values[i]));
  }
  const bool ct = o.format == WeightFormat::CompressedTensorsNvfp4;
  const float global = stored_global_scale(o.format, amax);
  const float input_global = stored_global_scale(o.format, kAssumedActivationAmax);
  std::vector<Piece> pieces;
  for (std::size_t i = 0; i < unit.params.size(); ++i) {
    const ParamSpec& p = *unit.params[i];
    const std::int64_t rows = p.shape[0], cols = p.shape[1];
    // Pieces follow tensor_decls' order: packed, block scales, global scale, input scale.
    Piece packed, scales, ws2, in_scale;
    packed.bytes.resize(static_cast<std::size_t>(rows * cols / 2));
    scales.bytes.resize(static_cast<std::size_t>(rows * cols / nvfp4::kBlock));
    if (ct) nvfp4::quantize_ct(values[i], rows, cols, global, packed.bytes, scales.bytes);
    else nvfp4::quantize(values[i], rows, cols, global, packed.bytes, scales.bytes);
    append_f32(ws2.bytes, global);
    append_f32(in_scale.bytes, input_global);
    buffers[i].reset();
    pieces.push_back(std::move(packed));
    pieces.push_back(std::move(scales));
    pieces.push_back(std::move(ws2));
    pieces.push_back(std::move(in_scale));
  }
  return pieces;
}

Piece make_bf16_chunk(const SynthOptions& o, const WorkItem& item) {
  const ParamSpec& p = *item.unit->params[0];
  const std::int64_t row_width = p.shape.size() > 1 ? numel(p.shape) / p.shape[0] : numel(p.shape);
  const std::int64_t n = (p.shape.size() > 1 ? item.row_end - item.row_begin : 1) * row_width;
  std::vector<float> values(static_cast<std::size_t>(n));
  draw(init_of(o.config, p), stream_seed(o.seed, p.module, item.chunk_index), values);
  Piece piece;
  piece.bytes.resize(values.size() * 2);
  for (std::size_t i = 0; i < values.size(); ++i) {
    const std::uint16_t b = float_to_bf16(values[i]);
    piece.bytes[2 * i] = static_cast<std::uint8_t>(b & 0xFF);
    piece.bytes[2 * i + 1] = static_cast<std::uint8_t>(b >> 8);
  }
  return piece;
}

std::vector<WorkItem> work_items(const Unit& unit) {
  if (unit.quantized) return {WorkItem{&unit, 0, 0, 0, unit.bytes}};
  const ParamSpec& p = *unit.params[0];
  if (p.shape.size() < 2) return {WorkItem{&unit, 0, 1, 0, unit.bytes}};
  const std::int64_t rows = p.shape[0];
  const std::int64_t row_width = numel(p.shape) / rows;
  const std::int64_t rows_per_chunk = std::max<std::int64_t>(1, kChunkElements / row_width);
  std::vector<WorkItem> items;
  for (std::int64_t r = 0, chunk = 0; r < rows; r += rows_per_chunk, ++chunk) {
    const std::int64_t end = std::min(rows, r + rows_per_chunk);
    items.push_back(WorkItem{&unit, r, end, static_cast<std::uint64_t>(chunk),
                             static_cast<std::uint64_t>((end - r) * row_width * 2)});
  }
  return items;
}

// --no-data for a large quantized unit: packed weights and block scales become holes, but the
// per-tensor scales stay real (from the distribution's bound), so the checkpoint still resolves.
std::vector<Piece> skeleton_quantized_unit(const SynthOptions& o, const Unit& unit) {
  float amax = 0.0f;
  for (const ParamSpec* p : unit.params) amax = std::max(amax, bound_of(init_of(o.config, *p)));
  const float global = stored_global_scale(o.format, amax);
  const float input_global = stored_global_scale(o.format, kAssumedActivationAmax);
  std::vector<Piece> pieces;
  for (const ParamSpec* p : unit.params) {
    Piece hole, ws2, in_scale;
    hole.hole = static_cast<std::uint64_t>(numel(p->shape) / 2 + numel(p->shape) / nvfp4::kBlock);
    append_f32(ws2.bytes, global);
    append_f32(in_scale.bytes, input_global);
    pieces.push_back(std::move(hole));
    pieces.push_back(std::move(ws2));
    pieces.push_back(std::move(in_scale));
  }
  return pieces;
}

std::vector<Piece> produce(const SynthOptions& o, const WorkItem& item) {
  if (o.no_data && item.bytes > kSmallTensorBytes) {
    if (item.unit->quantized) return skeleton_quantized_unit(o, *item.unit);
    Piece hole;
    hole.hole = item.bytes;
    return {std::move(hole)};
  }
  if (item.unit->quantized) return make_quantized_unit(o, *item.unit);
  std::vector<Piece> out;
  out.push_back(make_bf16_chunk(o, item));
  return out;
}

// Generates items in parallel, a window at a time, and writes them in order.
void write_items(const SynthOptions& o, const std::vector<WorkItem>& items, SafetensorsWriter& writer,
                 ProgressBar& progress) {
  const unsigned threads = o.threads ? o.threads : std::max(1u, std::thread::hardware_concurrency());
  constexpr std::uint64_t kWindowBytes = 512ull << 20;
  std::size_t begin = 0;
  while (begin < items.size()) {
    std::size_t end = begin;
    std::uint64_t window = 0;
    while (end < items.size() && (end == begin || window + items[end].bytes <= kWindowBytes))
      window += items[end++].bytes;
    std::vector<std::vector<Piece>> results(end - begin);
    std::atomic<std::size_t> next{begin};
    std::vector<std::thread> pool;
    std::exception_ptr error;
    std::atomic<bool> failed{false};
    for (unsigned t = 0; t < std::min<std::size_t>(threads, end - begin); ++t) {
      pool.emplace_back([&] {
        try {
          for (std::size_t i; (i = next++) < end && !failed;) results[i - begin] = produce(o, items[i]);
        } catch (...) {
          if (!failed.exchange(true)) error = std::current_exception();
        }
      });
    }
    for (auto& th : pool) th.join();
    if (error) std::rethrow_exception(error);
    for (std::size_t i = begin; i < end; ++i) {
      for (auto& piece : results[i - begin]) {
        if (piece.hole) writer.skip(piece.hole);
        else writer.write(piece.bytes);
      }
      progress.advance(items[i].bytes);
    }
    begin = end;
  }
}

void write_json(const fs::path& path, const json& doc) {
  std::ofstream out(path);
  if (!out) fail(path.string(), ": cannot create");
  out << doc.dump(2) << "\n";
  if (!out) fail(path.string(), ": write failed");
}

void prepare_out_dir(const SynthOptions& o) {
  if (o.out_dir.empty()) fail("--out is required");
  if (fs::exists(o.out_dir)) {
    if (!fs::is_directory(o.out_dir)) fail("--out ", o.out_dir.string(), ": exists and is not a directory");
    if (!fs::is_empty(o.out_dir)) {
      if (!o.force) fail("--out ", o.out_dir.string(), ": directory is not empty (use --force to replace it)");
      fs::remove_all(o.out_dir);
    }
  }
  fs::create_directories(o.out_dir);
}

void check_vocab_fits_tokenizer(const SynthOptions& o) {
  if (o.with_tokenizer && o.config.vocab_size < kQwen3TokenizerIds)
    fail("--vocab ", o.config.vocab_size, " is smaller than the Qwen3 tokenizer's ", kQwen3TokenizerIds,
         " ids; use --no-tokenizer for a model without tokenizer files");
}

void copy_tokenizer(const SynthOptions& o) {
  const fs::path dir = o.tokenizer_dir.empty() ? default_tokenizer_dir() : o.tokenizer_dir;
  check_vocab_fits_tokenizer(o);
  for (const char* name : {"tokenizer.json", "tokenizer_config.json", "NOTICE.md"}) {
    const fs::path src = dir / name;
    if (!fs::exists(src)) fail("tokenizer file ", src.string(), " not found (set FP4SERVE_ASSET_DIR or --tokenizer-dir)");
    fs::copy_file(src, o.out_dir / name, fs::copy_options::overwrite_existing);
  }
}

std::string shard_name(std::size_t index, std::size_t count) {
  if (count == 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return buf;
}

}  // namespace

fs::path default_tokenizer_dir() {
  if (const char* env = std::getenv("FP4SERVE_ASSET_DIR"); env && *env) return fs::path(env) / "qwen3-tokenizer";
  return fs::path(FP4SERVE_ASSET_DIR) / "qwen3-tokenizer";
}

SynthReport write_synthetic_checkpoint(const SynthOptions& o) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<ParamSpec> layout = weight_layout(o.config);
  const std::vector<Unit> units = plan_units(o.config, layout, o.format, o.scope);
  prepare_out_dir(o);
  if (o.with_tokenizer) copy_tokenizer(o);

  // Shards hold whole units, in order, each up to shard_bytes (a larger unit gets its own).
  std::vector<std::vector<const Unit*>> shards(1);
  std::uint64_t shard_size = 0, total = 0;
  for (const Unit& u : units) {
    if (!shards.back().empty() && shard_size + u.bytes > o.shard_bytes) {
      shards.emplace_back();
      shard_size = 0;
    }
    shards.back().push_back(&u);
    shard_size += u.bytes;
    total += u.bytes;
  }

  SynthReport report;
  ProgressBar progress("synth " + o.out_dir.filename().string(), total, o.progress);
  json weight_map = json::object();
  for (std::size_t s = 0; s < shards.size(); ++s) {
    const std::string name = shard_name(s, shards.size());
    std::vector<TensorDecl> decls;
    std::vector<WorkItem> items;
    for (const Unit* u : shards[s]) {
      for (const ParamSpec* p : u->params)
        for (auto& d : tensor_decls(*p, u->quantized, o.format)) decls.push_back(std::move(d));
      for (auto& item : work_items(*u)) items.push_back(item);
    }
    for (const auto& d : decls) weight_map[d.name] = name;
    report.tensors += decls.size();
    SafetensorsWriter writer(o.out_dir / name, std::move(decls), {{"format", "pt"}});
    write_items(o, items, writer, progress);
    writer.finish();
  }
  progress.finish();
  report.shards = shards.size();
  report.bytes = total;

  if (shards.size() > 1)
    write_json(o.out_dir / "model.safetensors.index.json",
               json{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}});
  write_json(o.out_dir / "config.json", config_json(o.config, o.format, o.scope));
  if (o.format == WeightFormat::ModelOptNvfp4)
    write_json(o.out_dir / "hf_quant_config.json", hf_quant_config_json(o.config, o.scope));
  write_json(o.out_dir / "generation_config.json", generation_config_json(o.config));
  report.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return report;
}

CheckpointSummary dry_run_summary(const SynthOptions& options) {
  check_vocab_fits_tokenizer(options);
  std::string pattern = (fs::temp_directory_path() / "fp4serve-synth-dry-run-XXXXXX").string();
  if (::mkdtemp(pattern.data()) == nullptr)
    fail("synth --dry-run: cannot create a scratch directory under ", fs::temp_directory_path().string());
  struct Scratch {
    fs::path path;
    ~Scratch() {
      std::error_code ignored;
      fs::remove_all(path, ignored);
    }
  } scratch{pattern};
  SynthOptions o = options;
  o.out_dir = scratch.path;
  o.no_data = true;
  o.with_tokenizer = false;  // the summary does not read it; checked above
  o.force = true;
  o.progress = false;
  write_synthetic_checkpoint(o);
  CheckpointSummary summary = summarize_checkpoint(scratch.path);
  summary.dir = options.out_dir;
  const std::string scratch_name = scratch.path.string();
  for (std::string& w : summary.warnings)  // messages name files; name the directory asked for
    for (std::size_t at; (at = w.find(scratch_name)) != std::string::npos;)
      w.replace(at, scratch_name.size(), options.out_dir.string());
  return summary;
}

}  // namespace fp4serve::synth
