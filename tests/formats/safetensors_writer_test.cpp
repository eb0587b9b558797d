// SafetensorsWriter: byte-exact output for the reference writer's own test vectors, round trips
// through the reader for every dtype, sparse holes, and every misuse.
#include "formats/safetensors_writer.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <iterator>
#include <numeric>
#include <string>
#include <vector>

#include "formats/safetensors.h"
#include "formats/st_builder.h"

namespace fp4serve {
namespace {

using st_test::error_of;
using st_test::TempDir;

std::string slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::span<const std::uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

std::vector<std::uint8_t> f32_bytes(std::initializer_list<float> values) {
  std::vector<std::uint8_t> out(values.size() * 4);
  std::memcpy(out.data(), std::data(values), out.size());
  return out;
}

// The Rust crate's test_serialization_forced_alignement: one F32 tensor [1,1,2,3] named "attn0".
// Its 65-byte header gets 7 spaces of padding so the data starts 8-byte aligned.
TEST(WriterFormat, MatchesTheReferenceWriterByteForByte) {
  TempDir dir;
  const auto path = dir / "ref.safetensors";
  SafetensorsWriter w(path, {{"attn0", DType::F32, {1, 1, 2, 3}}});
  w.write(f32_bytes({0, 1, 2, 3, 4, 5}));
  w.finish();
  const std::vector<std::uint8_t> expected = {
      72,  0,   0,   0,   0,   0,   0,   0,   123, 34,  97,  116, 116, 110, 48,  34,  58,  123, 34,  100,
      116, 121, 112, 101, 34,  58,  34,  70,  51,  50,  34,  44,  34,  115, 104, 97,  112, 101, 34,  58,
      91,  49,  44,  49,  44,  50,  44,  51,  93,  44,  34,  100, 97,  116, 97,  95,  111, 102, 102, 115,
      101, 116, 115, 34,  58,  91,  48,  44,  50,  52,  93,  125, 125, 32,  32,  32,  32,  32,  32,  32,
      0,   0,   0,   0,   0,   0,   128, 63,  0,   0,   0,   64,  0,   0,   64,  64,  0,   0,   128, 64,
      0,   0,   160, 64};
  const std::string got = slurp(path);
  EXPECT_EQ(std::vector<std::uint8_t>(got.begin(), got.end()), expected);
}

// The Rust crate's test_empty: no tensors, with and without metadata.
TEST(WriterFormat, EmptyFilesMatchTheReferenceWriter) {
  TempDir dir;
  SafetensorsWriter(dir / "a.safetensors", {}).finish();
  EXPECT_EQ(slurp(dir / "a.safetensors"), std::string("\x08\0\0\0\0\0\0\0{}      ", 16));
  SafetensorsWriter(dir / "b.safetensors", {}, {{"framework", "pt"}}).finish();
  EXPECT_EQ(slurp(dir / "b.safetensors"), std::string("\x28\0\0\0\0\0\0\0", 8) + R"({"__metadata__":{"framework":"pt"}})" + "     ");
}

TEST(WriterFormat, HeaderIsPaddedWithSpacesAndKeepsDeclarationOrder) {
  TempDir dir;
  const auto path = dir / "o.safetensors";
  SafetensorsWriter w(path, {{"z", DType::U8, {3}}, {"a", DType::U8, {1}}});
  w.write(as_bytes("zzza"));
  w.finish();
  const std::string bytes = slurp(path);
  std::uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<std::uint64_t>(static_cast<std::uint8_t>(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  const std::string header = bytes.substr(8, n);
  const auto close = header.rfind('}');
  EXPECT_EQ(header.find_first_not_of(' ', close + 1), std::string::npos) << "padding must be spaces";
  EXPECT_LT(header.size() - close - 1, 8u);
  EXPECT_LT(header.find("\"z\""), header.find("\"a\""));
  EXPECT_EQ(bytes.substr(8 + n), "zzza");
  const auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.find("z")->begin, 0u);
  EXPECT_EQ(f.find("a")->begin, 3u);
}

TEST(WriterRoundTrip, EveryDtype) {
  TempDir dir;
  const auto path = dir / "all.safetensors";
  std::vector<TensorDecl> decls;
  for (int i = 0; i <= static_cast<int>(DType::BOOL); ++i) {
    const auto dt = static_cast<DType>(i);
    decls.push_back({"t." + std::string(dtype_name(dt)), dt, {2, i + 1}});
  }
  decls.push_back({"scalar", DType::F64, {}});
  decls.push_back({"empty", DType::BF16, {0, 7}});
  const std::map<std::string, std::string> meta{{"format", "pt"}, {"producer", "fp4serve test"}};

  // Each tensor's bytes: a pattern that differs per tensor and per byte.
  std::vector<std::vector<std::uint8_t>> payloads;
  {
    SafetensorsWriter w(path, decls, meta);
    for (std::size_t k = 0; k < decls.size(); ++k) {
      std::vector<std::uint8_t> p(tensor_nbytes(decls[k]));
      for (std::size_t j = 0; j < p.size(); ++j) p[j] = static_cast<std::uint8_t>(k * 31 + j * 7 + 1);
      // Two writes per tensor, to exercise partial writes.
      const std::size_t half = p.size() / 2;
      w.write(std::span(p).first(half));
      w.write(std::span(p).subspan(half));
      payloads.push_back(std::move(p));
    }
    w.finish();
  }

  const auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.header().metadata, meta);
  ASSERT_EQ(f.tensors().size(), decls.size());
  for (std::size_t k = 0; k < decls.size(); ++k) {
    SCOPED_TRACE(decls[k].name);
    const TensorInfo* t = f.find(decls[k].name);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->dtype, decls[k].dtype);
    EXPECT_EQ(t->shape, decls[k].shape);
    EXPECT_EQ(t->nbytes(), payloads[k].size());
    const auto bytes = f.data(*t);
    EXPECT_EQ(std::vector<std::uint8_t>(bytes.begin(), bytes.end()), payloads[k]);
  }
}

TEST(WriterRoundTrip, OneWriteMaySpanSeveralTensors) {
  TempDir dir;
  const auto path = dir / "s.safetensors";
  SafetensorsWriter w(path, {{"a", DType::I16, {2}}, {"b", DType::U8, {3}}});
  w.write(as_bytes("0123456"));
  w.finish();
  const auto f = SafetensorsFile::open(path);
  const auto b = f.data(*f.find("b"));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()), b.size()), "456");
}

TEST(WriterSkip, HolesReadBackAsZeros) {
  TempDir dir;
  const auto path = dir / "h.safetensors";
  SafetensorsWriter w(path, {{"a", DType::U8, {4}}, {"b", DType::U8, {4}}, {"c", DType::U8, {4}}});
  w.skip(4);
  w.write(as_bytes("bbbb"));
  w.skip(4);  // the file ends in a hole: finish() must still give it its full length
  w.finish();
  const auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.header().data_size, 12u);
  for (const char* name : {"a", "c"}) {
    const auto bytes = f.data(*f.find(name));
    EXPECT_EQ(std::vector<std::uint8_t>(bytes.begin(), bytes.end()), std::vector<std::uint8_t>(4, 0)) << name;
  }
  const auto b = f.data(*f.find("b"));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(b.data()), b.size()), "bbbb");
}

TEST(WriterSkip, SkeletonCheckpointCostsNoDisk) {
  TempDir dir;
  const auto path = dir / "skeleton.safetensors";
  const std::uint64_t big = 1ull << 30;  // 4 GiB of F32 declared
  SafetensorsWriter w(path, {{"head", DType::U8, {8}}, {"w", DType::F32, {1 << 15, 1 << 15}}});
  w.write(as_bytes("HEADBYTE"));
  w.skip(big * 4);
  w.finish();
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_GT(static_cast<std::uint64_t>(st.st_size), big * 4);
  EXPECT_LT(static_cast<std::uint64_t>(st.st_blocks) * 512, 1u << 20) << "the hole was written out";
  const auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.find("w")->nbytes(), big * 4);
  EXPECT_EQ(f.data(*f.find("w"))[12345], 0);
}

TEST(WriterErrors, FinishWithMissingBytesNamesTheFileAndTensor) {
  TempDir dir;
  const auto path = dir / "m.safetensors";
  SafetensorsWriter w(path, {{"a", DType::U8, {2}}, {"b", DType::F32, {2}}});
  w.write(as_bytes("aab"));
  const std::string msg = error_of([&] { w.finish(); });
  EXPECT_CONTAINS(msg, path.string());
  EXPECT_CONTAINS(msg, "7 of 10 data bytes not written; tensor 'b' is incomplete");
}

TEST(WriterErrors, WriteOrSkipPastTheDeclaredData) {
  TempDir dir;
  const auto path = dir / "o.safetensors";
  SafetensorsWriter w(path, {{"a", DType::U8, {2}}});
  w.write(as_bytes("a"));
  std::string msg = error_of([&] { w.write(as_bytes("bc")); });
  EXPECT_CONTAINS(msg, path.string());
  EXPECT_CONTAINS(msg, "writing 2 bytes at data offset 1 overruns the declared data section of 2 bytes");
  msg = error_of([&] { w.skip(5); });
  EXPECT_CONTAINS(msg, "skipping 5 bytes at data offset 1 overruns");
  w.write(as_bytes("b"));  // the failed calls changed nothing
  w.finish();
  EXPECT_EQ(SafetensorsFile::open(path).tensors().size(), 1u);
}

TEST(WriterErrors, WriteAfterFinish) {
  TempDir dir;
  SafetensorsWriter w(dir / "f.safetensors", {});
  w.finish();
  w.finish();  // idempotent
  EXPECT_CONTAINS(error_of([&] { w.write(as_bytes("x")); }), "write after finish()");
  EXPECT_CONTAINS(error_of([&] { w.skip(1); }), "skip after finish()");
}

TEST(WriterErrors, BadDeclarations) {
  TempDir dir;
  const auto path = dir / "d.safetensors";
  std::string msg = error_of([&] { SafetensorsWriter(path, {{"a", DType::U8, {1}}, {"a", DType::U8, {1}}}); });
  EXPECT_CONTAINS(msg, path.string());
  EXPECT_CONTAINS(msg, "tensor 'a' is declared twice");
  msg = error_of([&] { SafetensorsWriter(path, {{"neg", DType::U8, {3, -2}}}); });
  EXPECT_CONTAINS(msg, path.string());
  EXPECT_CONTAINS(msg, "tensor 'neg': negative dimension -2");
  msg = error_of([&] { SafetensorsWriter(path, {{"huge", DType::F64, {1ll << 40, 1ll << 40}}}); });
  EXPECT_CONTAINS(msg, "tensor 'huge': shape overflows");
  msg = error_of([&] { SafetensorsWriter(path, {{"__metadata__", DType::U8, {1}}}); });
  EXPECT_CONTAINS(msg, "'__metadata__' cannot be used as a tensor name");
  msg = error_of([&] { SafetensorsWriter(path, {{"bad\xff", DType::U8, {1}}}); });
  EXPECT_CONTAINS(msg, "must be UTF-8");
}

TEST(WriterErrors, CannotCreateTheFile) {
  TempDir dir;
  const auto path = dir / "missing-dir" / "x.safetensors";
  const std::string msg = error_of([&] { SafetensorsWriter(path, {}); });
  EXPECT_CONTAINS(msg, path.string());
  EXPECT_CONTAINS(msg, "cannot create");
}

TEST(WriterErrors, TensorBytes) {
  EXPECT_EQ(tensor_nbytes({"a", DType::BF16, {3, 5}}), 30u);
  EXPECT_EQ(tensor_nbytes({"s", DType::I64, {}}), 8u);
  EXPECT_EQ(tensor_nbytes({"z", DType::F32, {0, 9}}), 0u);
  EXPECT_CONTAINS(error_of([] { tensor_nbytes({"n", DType::U8, {-1}}); }), "tensor 'n': negative dimension -1");
}

}  // namespace
}  // namespace fp4serve
