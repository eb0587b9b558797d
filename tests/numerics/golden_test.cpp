// Bit-exact agreement with the real quantization tools. The fixtures in
// tests/data/quant_golden/ are produced by tools/make_quant_fixtures.py with torch, NVIDIA
// ModelOpt and compressed-tensors (see that script and docs/numerics.md). This test reads only
// the raw little-endian arrays and meta.txt, never the .safetensors copies, so it does not
// depend on the formats layer.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "numerics/mxfp4.h"
#include "numerics/nvfp4.h"
#include "numerics/scalar_formats.h"

namespace fp4serve {
namespace {

namespace fs = std::filesystem;

fs::path case_dir(const std::string& name) { return fs::path(FP4SERVE_TEST_DATA) / "quant_golden" / name; }

std::vector<std::uint8_t> read_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open fixture " + path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

template <class T>
std::vector<T> read_array(const fs::path& path) {
  const std::vector<std::uint8_t> bytes = read_bytes(path);
  if (bytes.size() % sizeof(T) != 0) throw std::runtime_error("odd size: " + path.string());
  std::vector<T> out(bytes.size() / sizeof(T));
  std::memcpy(out.data(), bytes.data(), bytes.size());  // fixtures are little-endian, as is x86/ARM
  return out;
}

std::vector<float> bf16_array_to_float(const std::vector<std::uint16_t>& bits) {
  std::vector<float> out(bits.size());
  for (std::size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
  return out;
}

// meta.txt: "key value [# comment]" lines; fp32 scalars are written as 0x bit patterns.
class Meta {
 public:
  explicit Meta(const fs::path& dir) {
    std::ifstream in(dir / "meta.txt");
    if (!in) throw std::runtime_error("cannot open " + (dir / "meta.txt").string());
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream fields(line);
      std::string key, value;
      fields >> key >> value;
      values_[key] = value;
    }
  }
  std::int64_t integer(const std::string& key) const { return std::stoll(at(key)); }
  float f32(const std::string& key) const {
    return std::bit_cast<float>(static_cast<std::uint32_t>(std::stoul(at(key), nullptr, 16)));
  }

 private:
  const std::string& at(const std::string& key) const {
    const auto it = values_.find(key);
    if (it == values_.end()) throw std::runtime_error("meta.txt has no key " + key);
    return it->second;
  }
  std::map<std::string, std::string> values_;
};

// The tools' input: stored as fp32, or as bf16 for the bf16 case.
std::vector<float> load_input(const fs::path& dir) {
  if (fs::exists(dir / "input.f32")) return read_array<float>(dir / "input.f32");
  return bf16_array_to_float(read_array<std::uint16_t>(dir / "input.bf16"));
}

enum class Zeros { kExactBits, kSignless };

// Compares float arrays bit for bit. With Zeros::kSignless, +0 and -0 count as equal:
// compressed-tensors, vLLM and ModelOpt's MXFP4 decode E2M1 code 8 as -0.0, ModelOpt's NVFP4
// (and we) as +0.0.
void expect_same_floats(const std::vector<float>& got, const std::vector<float>& want, const std::string& what,
                        Zeros zeros = Zeros::kExactBits) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int mismatches = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool same = std::bit_cast<std::uint32_t>(got[i]) == std::bit_cast<std::uint32_t>(want[i]) ||
                      (zeros == Zeros::kSignless && got[i] == 0.0f && want[i] == 0.0f);
    if (!same && ++mismatches <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: got " << got[i] << " (0x" << std::hex
                    << std::bit_cast<std::uint32_t>(got[i]) << "), tool " << want[i] << " (0x"
                    << std::bit_cast<std::uint32_t>(want[i]) << std::dec << ")";
    }
  }
  EXPECT_EQ(mismatches, 0) << what << ": " << mismatches << " of " << got.size() << " differ";
}

void expect_same_bytes(const std::vector<std::uint8_t>& got, const std::vector<std::uint8_t>& want,
                       const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int mismatches = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && ++mismatches <= 5) {
      ADD_FAILURE() << what << "[" << i << "]: got 0x" << std::hex << int{got[i]} << ", tool 0x" << int{want[i]}
                    << std::dec;
    }
  }
  EXPECT_EQ(mismatches, 0) << what << ": " << mismatches << " of " << got.size() << " differ";
}

std::vector<float> to_bf16_and_back(const std::vector<float>& v) {
  std::vector<float> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = bf16_to_float(float_to_bf16(v[i]));
  return out;
}

// ---- scalar casts ----------------------------------------------------------------------------

class ScalarCasts : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = case_dir("scalar_casts");
    input_ = read_array<float>(dir_ / "input.f32");
    ASSERT_EQ(static_cast<std::int64_t>(input_.size()), Meta(dir_).integer("count"));
  }
  fs::path dir_;
  std::vector<float> input_;
};

TEST_F(ScalarCasts, E4M3TorchCastBitExact) {
  // Up to 464 and for NaN every torch version agrees with float_to_e4m3_torch. Past 464 torch
  // changed (PR #178817): older releases give NaN (our float_to_e4m3_torch), newer ones
  // saturate (our float_to_e4m3_satfinite). Whichever torch made the fixture, every overflow
  // input must follow that one convention.
  const auto want = read_array<std::uint8_t>(dir_ / "e4m3.u8");
  std::vector<std::uint8_t> got, want_in_range;
  int overflow = 0, saturating = 0, legacy = 0;
  for (std::size_t i = 0; i < input_.size(); ++i) {
    const float x = input_[i];
    if (std::isnan(x) || std::fabs(x) <= 464.0f) {
      got.push_back(float_to_e4m3_torch(x));
      want_in_range.push_back(want[i]);
      continue;
    }
    ++overflow;
    saturating += want[i] == float_to_e4m3_satfinite(x);
    legacy += want[i] == float_to_e4m3_torch(x);
  }
  expect_same_bytes(got, want_in_range, "float_to_e4m3_torch (|x| <= 464 or NaN)");
  EXPECT_GT(overflow, 100);
  EXPECT_TRUE(saturating == overflow || legacy == overflow)
      << overflow << " overflow inputs: " << saturating << " match satfinite, " << legacy << " match legacy torch";
}

TEST_F(ScalarCasts, E4M3SatfiniteMatchesClampThenCast) {
  const auto want = read_array<std::uint8_t>(dir_ / "e4m3_clamped.u8");
  std::vector<std::uint8_t> got, want_non_nan;
  for (std::size_t i = 0; i < input_.size(); ++i) {
    if (std::isnan(input_[i])) {
      // torch.clamp keeps the NaN's sign (0xFF possible); cvt.satfinite gives 0x7F.
      EXPECT_TRUE(std::isnan(e4m3_to_float(want[i])));
      EXPECT_EQ(float_to_e4m3_satfinite(input_[i]), 0x7F);
      continue;
    }
    got.push_back(float_to_e4m3_satfinite(input_[i]));
    want_non_nan.push_back(want[i]);
  }
  expect_same_bytes(got, want_non_nan, "float_to_e4m3_satfinite");
}

TEST_F(ScalarCasts, E5M2BitExact) {
  const auto want = read_array<std::uint8_t>(dir_ / "e5m2.u8");
  std::vector<std::uint8_t> got;
  for (float x : input_) got.push_back(float_to_e5m2(x));
  expect_same_bytes(got, want, "float_to_e5m2");
}

TEST_F(ScalarCasts, Bf16AndFp16BitExactNaNsStayNaN) {
  const auto want_bf16 = read_array<std::uint16_t>(dir_ / "bf16.bf16");
  const auto want_f16 = read_array<std::uint16_t>(dir_ / "f16.f16");
  int checked = 0;
  for (std::size_t i = 0; i < input_.size(); ++i) {
    const float x = input_[i];
    if (std::isnan(x)) {
      // torch's NaN bit patterns depend on the code path (its vectorized bf16 cast gives 0xFFFF).
      EXPECT_TRUE(std::isnan(bf16_to_float(want_bf16[i])));
      EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(x))));
      EXPECT_TRUE(std::isnan(fp16_to_float(want_f16[i])));
      EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(x))));
      continue;
    }
    ASSERT_EQ(float_to_bf16(x), want_bf16[i]) << "bf16 of " << x << " (0x" << std::hex << std::bit_cast<std::uint32_t>(x)
                                              << ")";
    ASSERT_EQ(float_to_fp16(x), want_f16[i]) << "fp16 of " << x << " (0x" << std::hex << std::bit_cast<std::uint32_t>(x)
                                             << ")";
    ++checked;
  }
  EXPECT_GT(checked, 5000);
}

TEST_F(ScalarCasts, E2M1MatchesModelOptAndCompressedTensors) {
  const auto want_mo = read_array<std::uint8_t>(dir_ / "e2m1_modelopt.u8");
  const auto want_ct = read_array<std::uint8_t>(dir_ / "e2m1_ct.u8");
  std::vector<std::uint8_t> got, got_ct, want_ct_non_nan;
  for (std::size_t i = 0; i < input_.size(); ++i) {
    const float x = input_[i];
    got.push_back(float_to_e2m1(x));
    if (std::isnan(x)) continue;  // CT's pack turns NaN into code 0, ModelOpt into 7
    // compressed-tensors clamps to +-6 before cast_to_fp4 (round_to_quantized_type_args).
    got_ct.push_back(float_to_e2m1(std::fmin(std::fmax(x, -6.0f), 6.0f)));
    want_ct_non_nan.push_back(want_ct[i]);
  }
  expect_same_bytes(got, want_mo, "float_to_e2m1 vs ModelOpt _cast_fp4");
  expect_same_bytes(got_ct, want_ct_non_nan, "float_to_e2m1 vs CT cast_to_fp4 + pack_fp4_to_uint8");
}

TEST_F(ScalarCasts, DecodeEveryE4M3AndE5M2CodeLikeTorch) {
  const auto e4m3 = read_array<float>(dir_ / "e4m3_decode.f32");
  const auto e5m2 = read_array<float>(dir_ / "e5m2_decode.f32");
  ASSERT_EQ(e4m3.size(), 256u);
  ASSERT_EQ(e5m2.size(), 256u);
  for (int c = 0; c < 256; ++c) {
    const auto code = static_cast<std::uint8_t>(c);
    if (std::isnan(e4m3[c])) {
      EXPECT_TRUE(std::isnan(e4m3_to_float(code))) << c;
    } else {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(e4m3_to_float(code)), std::bit_cast<std::uint32_t>(e4m3[c])) << c;
    }
    if (std::isnan(e5m2[c])) {
      EXPECT_TRUE(std::isnan(e5m2_to_float(code))) << c;
    } else {
      EXPECT_EQ(std::bit_cast<std::uint32_t>(e5m2_to_float(code)), std::bit_cast<std::uint32_t>(e5m2[c])) << c;
    }
  }
}

TEST(GlobalScales, MatchModelOptAndCompressedTensors) {
  const fs::path dir = case_dir("global_scales");
  const auto amax = read_array<float>(dir / "amax.f32");
  const auto ws2 = read_array<float>(dir / "weight_scale_2.f32");
  const auto global = read_array<float>(dir / "weight_global_scale.f32");
  ASSERT_EQ(static_cast<std::int64_t>(amax.size()), Meta(dir).integer("count"));
  std::vector<float> got_ws2, got_global;
  for (float a : amax) {
    got_ws2.push_back(nvfp4::global_scale_from_amax(a));
    got_global.push_back(nvfp4::ct_global_scale_from_amax(a));
  }
  expect_same_floats(got_ws2, ws2, "global_scale_from_amax vs get_weights_scaling_factor_2");
  expect_same_floats(got_global, global, "ct_global_scale_from_amax vs generate_gparam");
}

// ---- NVFP4 weights: ModelOpt ------------------------------------------------------------------

class ModelOptNvfp4 : public ::testing::TestWithParam<std::string> {};

TEST_P(ModelOptNvfp4, QuantizeAndDequantizeBitExact) {
  const fs::path dir = case_dir(GetParam());
  const Meta meta(dir);
  const std::int64_t rows = meta.integer("rows");
  const std::int64_t cols = meta.integer("cols");
  const float ws2 = meta.f32("weight_scale_2");
  const std::vector<float> w = load_input(dir);
  ASSERT_EQ(static_cast<std::int64_t>(w.size()), rows * cols);
  ASSERT_EQ(read_array<float>(dir / "weight_scale_2.f32"), std::vector<float>{ws2});
  if (meta.integer("ws2_from_amax") == 1) {
    EXPECT_EQ(std::bit_cast<std::uint32_t>(nvfp4::global_scale_from_amax(nvfp4::amax(w))),
              std::bit_cast<std::uint32_t>(ws2));
  }

  const auto want_packed = read_array<std::uint8_t>(dir / "weight.u8");
  const auto want_scales = read_array<std::uint8_t>(dir / "weight_scale.e4m3");
  std::vector<std::uint8_t> packed(w.size() / 2), scales(w.size() / nvfp4::kBlock);
  nvfp4::quantize(w, rows, cols, ws2, packed, scales);
  expect_same_bytes(scales, want_scales, "weight_scale");
  expect_same_bytes(packed, want_packed, "weight (packed E2M1)");

  std::vector<float> deq(w.size());
  nvfp4::dequantize(want_packed, want_scales, ws2, rows, cols, deq);
  expect_same_floats(deq, read_array<float>(dir / "dequant.f32"), "dequantize");
  expect_same_floats(to_bf16_and_back(deq), bf16_array_to_float(read_array<std::uint16_t>(dir / "dequant_bf16.bf16")),
                     "dequantize(dtype=bf16)");
}

INSTANTIATE_TEST_SUITE_P(Fixtures, ModelOptNvfp4,
                         ::testing::Values("nvfp4_mixed_modelopt", "nvfp4_randn_modelopt", "nvfp4_bf16_modelopt",
                                           "nvfp4_order_modelopt", "nvfp4_shared_ws2_modelopt",
                                           "nvfp4_small_ws2_modelopt"));

// The mixed fixture is only worth its name if it exercises every special path; check that the
// tool's output really contains them, so a regenerated fixture cannot silently lose coverage.
TEST(ModelOptNvfp4Coverage, MixedFixtureHitsEverySpecialCase) {
  const fs::path dir = case_dir("nvfp4_mixed_modelopt");
  const auto scales = read_array<std::uint8_t>(dir / "weight_scale.e4m3");
  const auto packed = read_array<std::uint8_t>(dir / "weight.u8");
  int zero_block = 0, clamped = 0, subnormal = 0, saturated = 0, neg_zero_code = 0;
  for (std::uint8_t s : scales) {
    zero_block += s == 0x38;
    clamped += s == 0x01;
    subnormal += s > 0x01 && s < 0x08;
  }
  for (std::uint8_t b : packed) {
    for (std::uint8_t code : {static_cast<std::uint8_t>(b & 0x0F), static_cast<std::uint8_t>(b >> 4)}) {
      saturated += (code & 7) == 7;
      neg_zero_code += code == 8;
    }
  }
  EXPECT_GE(zero_block, 8);
  EXPECT_GT(clamped, 0);
  EXPECT_GT(subnormal, 0);
  EXPECT_GT(saturated, 0);
  EXPECT_GT(neg_zero_code, 0);
  const auto small_ws2 = read_array<std::uint8_t>(case_dir("nvfp4_small_ws2_modelopt") / "weight_scale.e4m3");
  int at_448 = 0;
  for (std::uint8_t s : small_ws2) at_448 += s == 0x7E;
  EXPECT_GT(at_448, 0) << "small_ws2 must hit the 448 clamp";
}

// ---- NVFP4 weights: compressed-tensors --------------------------------------------------------

class CompressedTensorsNvfp4 : public ::testing::TestWithParam<std::string> {};

TEST_P(CompressedTensorsNvfp4, QuantizeAndDequantizeBitExact) {
  const fs::path dir = case_dir(GetParam());
  const Meta meta(dir);
  const std::int64_t rows = meta.integer("rows");
  const std::int64_t cols = meta.integer("cols");
  const float global = meta.f32("weight_global_scale");
  const std::vector<float> w = load_input(dir);
  ASSERT_EQ(static_cast<std::int64_t>(w.size()), rows * cols);
  EXPECT_EQ(std::bit_cast<std::uint32_t>(nvfp4::ct_global_scale_from_amax(nvfp4::amax(w))),
            std::bit_cast<std::uint32_t>(global));

  const auto want_packed = read_array<std::uint8_t>(dir / "weight_packed.u8");
  const auto want_scales = read_array<std::uint8_t>(dir / "weight_scale.e4m3");
  std::vector<std::uint8_t> packed(w.size() / 2), scales(w.size() / nvfp4::kBlock);
  nvfp4::quantize_ct(w, rows, cols, global, packed, scales);
  expect_same_bytes(scales, want_scales, "weight_scale");
  expect_same_bytes(packed, want_packed, "weight_packed");

  std::vector<float> deq(w.size());
  nvfp4::dequantize_ct(want_packed, want_scales, global, rows, cols, deq);
  expect_same_floats(deq, read_array<float>(dir / "dequant.f32"), "dequantize_ct", Zeros::kSignless);
  expect_same_floats(to_bf16_and_back(deq),
                     bf16_array_to_float(read_array<std::uint16_t>(dir / "dequant_bf16.bf16")),
                     "NVFP4PackedCompressor.decompress (bf16)", Zeros::kSignless);
}

INSTANTIATE_TEST_SUITE_P(Fixtures, CompressedTensorsNvfp4,
                         ::testing::Values("nvfp4_mixed_ct", "nvfp4_randn_ct", "nvfp4_bf16_ct", "nvfp4_order_ct"));

// ModelOpt's quantizer fed CT's inverted scale does not reproduce CT: the operation orders
// differ. This documents that a loader must not "convert" one convention into the other and
// expect identical bytes; each has its own function.
TEST(CompressedTensorsNvfp4Convention, ModelOptOrderWithInvertedScaleDiffers) {
  const fs::path dir = case_dir("nvfp4_mixed_ct");
  const Meta meta(dir);
  const std::vector<float> w = load_input(dir);
  const auto want_scales = read_array<std::uint8_t>(dir / "weight_scale.e4m3");
  std::vector<std::uint8_t> packed(w.size() / 2), scales(w.size() / nvfp4::kBlock);
  nvfp4::quantize(w, meta.integer("rows"), meta.integer("cols"), 1.0f / meta.f32("weight_global_scale"), packed,
                  scales);
  int differ = 0;
  for (std::size_t i = 0; i < scales.size(); ++i) differ += scales[i] != want_scales[i];
  EXPECT_GT(differ, 0) << "zero/tiny blocks: ModelOpt uses 1.0 or 2^-9, CT 0.125";
}

// ---- W4A4 activations: vLLM reference -------------------------------------------------------

class VllmActivations : public ::testing::TestWithParam<std::string> {};

TEST_P(VllmActivations, QuantizeAndDequantizeBitExact) {
  const fs::path dir = case_dir(GetParam());
  const Meta meta(dir);
  const std::int64_t rows = meta.integer("rows");
  const std::int64_t cols = meta.integer("cols");
  const float global = meta.f32("input_global_scale");
  const auto x = read_array<float>(dir / "input.f32");
  std::vector<std::uint8_t> packed(x.size() / 2), scales(x.size() / nvfp4::kBlock);
  nvfp4::quantize_activations(x, rows, cols, global, packed, scales);
  expect_same_bytes(scales, read_array<std::uint8_t>(dir / "x_scale.e4m3"), "activation block scales");

  // vLLM returns the E2M1 values as floats (cast_to_fp4), not packed codes.
  std::vector<float> values(x.size());
  for (std::size_t k = 0; k < x.size(); ++k) {
    values[k] = e2m1_to_float(static_cast<std::uint8_t>(k % 2 == 0 ? packed[k / 2] & 0x0F : packed[k / 2] >> 4));
  }
  expect_same_floats(values, read_array<float>(dir / "x_fp4.f32"), "activation E2M1 values", Zeros::kSignless);

  std::vector<float> deq(x.size());
  nvfp4::dequantize_activations(packed, scales, global, rows, cols, deq);
  expect_same_floats(deq, read_array<float>(dir / "dequant.f32"), "ref_nvfp4_quant_dequant", Zeros::kSignless);

}

INSTANTIATE_TEST_SUITE_P(Fixtures, VllmActivations, ::testing::Values("nvfp4_act_vllm", "nvfp4_act_order_vllm"));

TEST(VllmActivationsCoverage, FixtureHitsZeroAndSaturatedScales) {
  const auto scales = read_array<std::uint8_t>(case_dir("nvfp4_act_vllm") / "x_scale.e4m3");
  int zero_scales = 0, saturated_scales = 0;
  for (std::uint8_t s : scales) {
    zero_scales += s == 0x00;
    saturated_scales += s == 0x7E;
  }
  EXPECT_GT(zero_scales, 0) << "fixture must cover the zero-scale reciprocal guard";
  EXPECT_GT(saturated_scales, 0) << "fixture must cover the 448 clamp";
}

// ---- MXFP4 ----------------------------------------------------------------------------------

TEST(ModelOptMxfp4, DequantizeBitExact) {
  const fs::path dir = case_dir("mxfp4_modelopt");
  const Meta meta(dir);
  const std::int64_t rows = meta.integer("rows");
  const std::int64_t cols = meta.integer("cols");
  const auto blocks = read_array<std::uint8_t>(dir / "blocks.u8");
  const auto scales = read_array<std::uint8_t>(dir / "scales.u8");
  std::vector<float> deq(static_cast<std::size_t>(rows * cols));
  mxfp4::dequantize(blocks, scales, rows, cols, deq);
  // ModelOpt's MXFP4 decoder (like transformers') gives -0.0 for code 8; we give +0.0.
  expect_same_floats(deq, read_array<float>(dir / "dequant.f32"), "mxfp4::dequantize", Zeros::kSignless);
  bool has_min_scale = false;
  for (std::uint8_t s : scales) has_min_scale |= s == 0;
  EXPECT_TRUE(has_min_scale) << "fixture must cover the 2^-127 scale (code 0)";
}

}  // namespace
}  // namespace fp4serve
