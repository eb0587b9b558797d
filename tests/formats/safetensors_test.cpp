// Reader of single safetensors files: the happy path and one test per validation rule. Every
// malformed file is built byte by byte (st_builder.h), and every error must name the file and,
// where one is at fault, the tensor.
#include "formats/safetensors.h"

#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <string>
#include <vector>

#include "formats/dtype.h"
#include "formats/st_builder.h"

namespace fp4serve {
namespace {

using st_test::error_of;
using st_test::st_file;
using st_test::st_image;
using st_test::st_image_with_length;
using st_test::TempDir;
using st_test::write_bytes;
using st_test::write_st;

std::string open_error(const std::filesystem::path& path) {
  return error_of([&] { SafetensorsFile::open(path); });
}

std::span<const std::uint8_t> as_bytes(std::string_view s) {
  return {reinterpret_cast<const std::uint8_t*>(s.data()), s.size()};
}

// ---------------------------------------------------------------------------------------------
// dtype table

TEST(SafetensorsDType, NamesRoundTripWithSizes) {
  struct Row {
    const char* name;
    DType dtype;
    std::size_t size;
    bool is_float;
  };
  const Row rows[] = {
      {"F64", DType::F64, 8, true},         {"F32", DType::F32, 4, true},
      {"F16", DType::F16, 2, true},         {"BF16", DType::BF16, 2, true},
      {"F8_E4M3", DType::F8_E4M3, 1, true}, {"F8_E5M2", DType::F8_E5M2, 1, true},
      {"I64", DType::I64, 8, false},        {"I32", DType::I32, 4, false},
      {"I16", DType::I16, 2, false},        {"I8", DType::I8, 1, false},
      {"U8", DType::U8, 1, false},          {"BOOL", DType::BOOL, 1, false},
  };
  for (const auto& r : rows) {
    SCOPED_TRACE(r.name);
    ASSERT_EQ(dtype_from_name(r.name), r.dtype);
    EXPECT_EQ(dtype_name(r.dtype), r.name);
    EXPECT_EQ(dtype_size(r.dtype), r.size);
    EXPECT_EQ(dtype_is_float(r.dtype), r.is_float);
  }
}

TEST(SafetensorsDType, UnknownNamesAreRejected) {
  for (const char* name : {"", "bf16", "F4", "F8_E8M0", "U16", "U32", "U64", "C64", "F32 ", "float32"}) {
    EXPECT_FALSE(dtype_from_name(name).has_value()) << name;
  }
}

TEST(SafetensorsDType, ShapeBytes) {
  const std::vector<std::int64_t> scalar, zero{4, 0, 3}, m{3, 5}, neg{2, -1};
  EXPECT_EQ(shape_nbytes(DType::F32, scalar), 4u);
  EXPECT_EQ(shape_nbytes(DType::BF16, zero), 0u);
  EXPECT_EQ(shape_nbytes(DType::I64, m), 120u);
  EXPECT_FALSE(shape_nbytes(DType::U8, neg).has_value());
  const std::vector<std::int64_t> big{1ll << 31, 1ll << 31};  // 2^62 elements
  EXPECT_EQ(shape_nbytes(DType::U8, big), 1ull << 62);
  EXPECT_FALSE(shape_nbytes(DType::F32, big).has_value());  // 2^64 bytes
  const std::vector<std::int64_t> big_with_zero{1ll << 40, 1ll << 40, 0};
  EXPECT_FALSE(shape_nbytes(DType::U8, big_with_zero).has_value());
}

// ---------------------------------------------------------------------------------------------
// Well-formed files

TEST(SafetensorsRead, ParsesTensorsMetadataAndData) {
  TempDir dir;
  // Declared out of offset order, with padding spaces after the JSON as writers add.
  const std::string header =
      R"({"__metadata__":{"format":"pt","note":"x"},)"
      R"("b":{"dtype":"BF16","shape":[3],"data_offsets":[8,14]},)"
      R"("a":{"dtype":"I32","shape":[2,1],"data_offsets":[0,8]}}   )";
  std::string data;
  const std::int32_t a[2] = {7, -9};
  data.append(reinterpret_cast<const char*>(a), sizeof(a));
  data.append("\x01\x02\x03\x04\x05\x06", 6);
  const auto path = write_st(dir / "m.safetensors", header, data);

  const auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f.path(), path);
  EXPECT_EQ(f.header().header_size, header.size());
  EXPECT_EQ(f.header().data_size, 14u);
  EXPECT_EQ(f.header().metadata, (std::map<std::string, std::string>{{"format", "pt"}, {"note", "x"}}));
  ASSERT_EQ(f.tensors().size(), 2u);

  const TensorInfo& ta = f.tensors()[0];  // sorted by offset
  EXPECT_EQ(ta.name, "a");
  EXPECT_EQ(ta.dtype, DType::I32);
  EXPECT_EQ(ta.shape, (std::vector<std::int64_t>{2, 1}));
  EXPECT_EQ(ta.numel(), 2);
  EXPECT_EQ(ta.nbytes(), 8u);
  std::int32_t back[2];
  ASSERT_EQ(f.data(ta).size(), sizeof(back));
  std::memcpy(back, f.data(ta).data(), sizeof(back));
  EXPECT_EQ(back[0], 7);
  EXPECT_EQ(back[1], -9);

  const TensorInfo& tb = f.tensors()[1];
  EXPECT_EQ(tb.name, "b");
  EXPECT_EQ(tb.dtype, DType::BF16);
  EXPECT_EQ(tb.begin, 8u);
  EXPECT_EQ(tb.end, 14u);
  const auto bytes = f.data(tb);
  EXPECT_EQ(std::vector<std::uint8_t>(bytes.begin(), bytes.end()), (std::vector<std::uint8_t>{1, 2, 3, 4, 5, 6}));

  EXPECT_EQ(f.find("b"), &tb);
  EXPECT_EQ(f.find("c"), nullptr);
}

TEST(SafetensorsRead, ScalarAndEmptyTensors) {
  TempDir dir;
  const auto path = write_st(dir / "s.safetensors",
                             R"({"s":{"dtype":"F64","shape":[],"data_offsets":[0,8]},)"
                             R"("e":{"dtype":"F32","shape":[4,0],"data_offsets":[8,8]},)"
                             R"("e2":{"dtype":"U8","shape":[0],"data_offsets":[8,8]}})",
                             std::string(8, '\0'));
  const auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f.tensors().size(), 3u);
  EXPECT_EQ(f.tensors()[0].name, "s");
  EXPECT_TRUE(f.tensors()[0].shape.empty());
  EXPECT_EQ(f.tensors()[0].numel(), 1);
  EXPECT_EQ(f.tensors()[1].name, "e");
  EXPECT_EQ(f.tensors()[1].numel(), 0);
  EXPECT_EQ(f.data(f.tensors()[1]).size(), 0u);
}

TEST(SafetensorsRead, EmptyFileWithNoTensors) {
  TempDir dir;
  const auto f = SafetensorsFile::open(write_st(dir / "e.safetensors", "{}      "));
  EXPECT_TRUE(f.tensors().empty());
  EXPECT_TRUE(f.header().metadata.empty());
  EXPECT_EQ(f.header().data_size, 0u);
}

TEST(SafetensorsRead, IgnoresUnknownFieldsAndNullMetadataLikeTheReferenceReader) {
  TempDir dir;
  const auto f = SafetensorsFile::open(write_st(
      dir / "u.safetensors",
      R"({"__metadata__":null,"t":{"dtype":"U8","shape":[2],"data_offsets":[0,2],"extra":{"k":[1,2]}}})", "ab"));
  ASSERT_EQ(f.tensors().size(), 1u);
  EXPECT_TRUE(f.header().metadata.empty());
}

TEST(SafetensorsRead, ParsesAnInMemoryImageAndNamesTheSource) {
  const std::string image = st_image(R"({"t":{"dtype":"I16","shape":[2],"data_offsets":[0,4]}})", "wxyz");
  const auto h = parse_safetensors_image(as_bytes(image), "memory");
  ASSERT_EQ(h.tensors.size(), 1u);
  EXPECT_EQ(h.tensors[0].dtype, DType::I16);

  const std::string bad = st_image(R"({"t":{"dtype":"I16","shape":[3],"data_offsets":[0,4]}})", "wxyz");
  const auto msg = error_of([&] { parse_safetensors_image(as_bytes(bad), "memory"); });
  EXPECT_CONTAINS(msg, "memory: tensor 't'");
}

// Pages of [begin, end) that are in the page cache.
std::size_t resident_pages(const std::uint8_t* begin, const std::uint8_t* end) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto lo = reinterpret_cast<std::uintptr_t>(begin) / page * page;
  const auto hi = (reinterpret_cast<std::uintptr_t>(end) + page - 1) / page * page;
  std::vector<unsigned char> vec((hi - lo) / page);
  if (::mincore(reinterpret_cast<void*>(lo), hi - lo, vec.data()) != 0) return SIZE_MAX;
  std::size_t n = 0;
  for (unsigned char v : vec) n += v & 1;
  return n;
}

TEST(SafetensorsRead, OpeningDoesNotTouchTensorData) {
  // A 1 GiB tensor that is a hole in a sparse file, so none of it is cached to begin with.
  TempDir dir;
  const auto path = dir / "big.safetensors";
  const std::string header = R"({"w":{"dtype":"U8","shape":[1073741824],"data_offsets":[0,1073741824]}})";
  write_st(path, header);
  std::filesystem::resize_file(path, 8 + header.size() + (1ull << 30));
  const auto f = SafetensorsFile::open(path);
  ASSERT_EQ(f.tensors().size(), 1u);
  const auto data = f.data(f.tensors()[0]);
  ASSERT_EQ(data.size(), 1ull << 30);
  // Reading the header may read ahead a little past it; everything beyond 64 MiB must be untouched.
  const std::uint8_t* far = data.data() + (64u << 20);
  EXPECT_EQ(resident_pages(far, data.data() + data.size()), 0u);
  // The probe itself works: touching one byte brings its page in.
  volatile std::uint8_t byte = far[100u << 20];
  EXPECT_EQ(byte, 0);
  EXPECT_GE(resident_pages(far + (100u << 20), far + (100u << 20) + 1), 1u);
}

// ---------------------------------------------------------------------------------------------
// Malformed files: one test per rule

class SafetensorsReject : public ::testing::Test {
 protected:
  // Writes the file and returns the error opening it, which must name the file.
  std::string reject(std::string_view header, std::string_view data = {}) {
    return reject_bytes(st_image(header, data));
  }
  std::string reject_bytes(std::string_view bytes) {
    write_bytes(path_, bytes);
    std::string msg = open_error(path_);
    EXPECT_CONTAINS(msg, path_.string());
    return msg;
  }

  TempDir dir_;
  std::filesystem::path path_ = dir_ / "bad.safetensors";
};

TEST_F(SafetensorsReject, FileShorterThanTheLengthPrefix) {
  EXPECT_CONTAINS(reject_bytes(""), "0 bytes, too short");
  EXPECT_CONTAINS(reject_bytes(std::string("\x10\0\0\0\0\0\0", 7)), "file is 7 bytes, too short");
}

TEST_F(SafetensorsReject, HeaderLengthAboveTheLimit) {
  const std::string msg = reject_bytes(st_image_with_length(kMaxSafetensorsHeaderBytes + 1, "{}"));
  EXPECT_CONTAINS(msg, "header length " + std::to_string(kMaxSafetensorsHeaderBytes + 1));
  EXPECT_CONTAINS(msg, "exceeds");
  EXPECT_CONTAINS(reject_bytes(st_image_with_length(~0ull, "{}")), "exceeds");
}

TEST_F(SafetensorsReject, HeaderLengthPastTheEndOfTheFile) {
  const std::string msg = reject_bytes(st_image_with_length(100, "{}      "));
  EXPECT_CONTAINS(msg, "header length 100 runs past the end of the 16-byte file");
}

TEST_F(SafetensorsReject, InvalidJson) {
  EXPECT_CONTAINS(reject(R"({"t":{"dtype":"F32",)"), "header is not valid JSON");
  EXPECT_CONTAINS(reject(""), "header is not valid JSON");
  EXPECT_CONTAINS(reject("{}  x"), "header is not valid JSON");
  // A number beyond double range is a different nlohmann exception; it must still be an Error.
  EXPECT_CONTAINS(reject(R"({"t":{"dtype":"U8","shape":[1e999],"data_offsets":[0,0]}})"), "header is not valid JSON");
}

TEST_F(SafetensorsReject, InvalidUtf8InHeader) {
  EXPECT_CONTAINS(reject("{\"t\xff\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[0,1]}}", "x"), "header is not valid JSON");
}

TEST_F(SafetensorsReject, HeaderIsNotAnObject) {
  EXPECT_CONTAINS(reject("[1,2]   "), "header is not a JSON object (it is array)");
  EXPECT_CONTAINS(reject(R"("str")"), "header is not a JSON object (it is string)");
}

TEST_F(SafetensorsReject, DeepNesting) {
  std::string deep = R"({"t":{"dtype":"U8","shape":[],"data_offsets":[0,1],"x":)";
  deep += std::string(100, '[') + std::string(100, ']') + "}}";
  EXPECT_CONTAINS(reject(deep, "z"), "nests more than 16 levels");
}

TEST_F(SafetensorsReject, EntryIsNotAnObject) {
  const std::string msg = reject(R"({"w":[0,4]})");
  EXPECT_CONTAINS(msg, "tensor 'w': entry is not a JSON object (it is array)");
}

TEST_F(SafetensorsReject, MissingFields) {
  EXPECT_CONTAINS(reject(R"({"w":{"shape":[1],"data_offsets":[0,1]}})", "x"), "tensor 'w': entry has no 'dtype'");
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"U8","data_offsets":[0,1]}})", "x"), "tensor 'w': entry has no 'shape'");
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"U8","shape":[1]}})", "x"), "tensor 'w': entry has no 'data_offsets'");
}

TEST_F(SafetensorsReject, DtypeNotAString) {
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":4,"shape":[1],"data_offsets":[0,4]}})", "abcd"), "tensor 'w': 'dtype' is not a string (it is 4)");
}

TEST_F(SafetensorsReject, UnknownDtype) {
  const std::string msg = reject(R"({"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}})", "x");
  EXPECT_CONTAINS(msg, "tensor 'w': unknown dtype 'F4'");
  EXPECT_CONTAINS(msg, "BF16");  // lists what is supported
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"bf16","shape":[1],"data_offsets":[0,2]}})", "xy"), "tensor 'w': unknown dtype 'bf16'");
}

TEST_F(SafetensorsReject, ShapeNotAnArrayOfIntegers) {
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"U8","shape":"2x2","data_offsets":[0,4]}})", "abcd"), "tensor 'w': 'shape' is not an array");
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"U8","shape":[2,2.0],"data_offsets":[0,4]}})", "abcd"), "tensor 'w': shape dimension 1 is not an integer");
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"U8","shape":[[2]],"data_offsets":[0,2]}})", "ab"), "tensor 'w': shape dimension 0 is not an integer");
}

TEST_F(SafetensorsReject, NegativeDimension) {
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"U8","shape":[4,-1],"data_offsets":[0,4]}})", "abcd"), "tensor 'w': shape dimension 1 is negative (-1)");
}

TEST_F(SafetensorsReject, DimensionBeyondInt64) {
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,4]}})", "abcd"), "tensor 'w': shape dimension 0 is too large");
}

TEST_F(SafetensorsReject, ShapeProductOverflow) {
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})"), "tensor 'w': shape [4294967296, 4294967296] of F32 overflows");
  // Still rejected when a zero makes the true product 0: no caller may multiply its way to UB.
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"U8","shape":[4294967296,4294967296,0],"data_offsets":[0,0]}})"), "tensor 'w': shape [4294967296, 4294967296, 0] of U8 overflows");
}

TEST_F(SafetensorsReject, OffsetsNotTwoIntegers) {
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1,2]}})", "x"), "tensor 'w': 'data_offsets' is not an array of two integers");
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":{"a":1}}})", "x"), "tensor 'w': 'data_offsets' is not an array of two integers");
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,"1"]}})", "x"), "tensor 'w': data_offsets[1] is not an integer");
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}})", "x"), "tensor 'w': data_offsets[0] is negative (-1)");
}

TEST_F(SafetensorsReject, OffsetsReversed) {
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[1,0]}})", "x"), "tensor 'w': data_offsets [1, 0] are reversed");
}

TEST_F(SafetensorsReject, TruncatedFile) {
  // The header promises 16 bytes of data; only 10 made it to disk.
  const std::string msg = reject(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                                 R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                                 std::string(10, 'x'));
  EXPECT_CONTAINS(msg, "tensor 'b': data_offsets [8, 16] run past the end of the 10-byte data section");
  EXPECT_CONTAINS(msg, "truncated");
}

TEST_F(SafetensorsReject, SpanDoesNotMatchShapeAndDtype) {
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"BF16","shape":[2,3],"data_offsets":[0,6]}})", "abcdef"), "tensor 'w': data_offsets [0, 6] span 6 bytes but shape [2, 3] of BF16 needs 12");
}

TEST_F(SafetensorsReject, OverlappingTensors) {
  const std::string msg = reject(R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                                 R"("b":{"dtype":"U8","shape":[8],"data_offsets":[4,12]}})",
                                 std::string(12, 'x'));
  EXPECT_CONTAINS(msg, "tensor 'b': data [4, 12) overlaps tensor 'a' [0, 8)");
  // Two tensors sharing the same bytes (aliasing) is an overlap too.
  EXPECT_CONTAINS(reject(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                     R"("b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})",
                     "abcd"), "tensor 'b': data [0, 4) overlaps tensor 'a' [0, 4)");
}

TEST_F(SafetensorsReject, HoleBetweenTensors) {
  const std::string msg = reject(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                                 R"("b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})",
                                 std::string(10, 'x'));
  EXPECT_CONTAINS(msg, "tensor 'b': data begins at offset 6 but tensor 'a' ends at 4: a 2-byte hole");
}

TEST_F(SafetensorsReject, HoleAtTheStartOfTheData) {
  EXPECT_CONTAINS(reject(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})", std::string(8, 'x')), "tensor 'a': data begins at offset 4, leaving a 4-byte hole at the start");
}

TEST_F(SafetensorsReject, BytesAfterTheLastTensor) {
  EXPECT_CONTAINS(reject(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})", "abcdEF"), "2 stray bytes after the last tensor 'a'");
  EXPECT_CONTAINS(reject("{}", "junk"), "declares no tensors but the data section holds 4 bytes");
}

TEST_F(SafetensorsReject, MetadataMustMapStringsToStrings) {
  EXPECT_CONTAINS(reject(R"({"__metadata__":["format","pt"]})"), "__metadata__ is not a JSON object (it is array)");
  EXPECT_CONTAINS(reject(R"({"__metadata__":{"format":"pt","version":3}})"), "__metadata__ value of 'version' is not a string (it is 3)");
  EXPECT_CONTAINS(reject(R"({"__metadata__":{"nested":{"a":"b"}}})"), "__metadata__ value of 'nested' is not a string");
}

TEST_F(SafetensorsReject, DuplicateKeys) {
  // JSON parsers silently keep one of two equal keys; a header that says two things is corrupt.
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                     R"("w":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
                     "ab"), "tensor 'w' is declared twice");
  EXPECT_CONTAINS(reject(R"({"w":{"dtype":"U8","shape":[1],"dtype":"I8","data_offsets":[0,1]}})", "a"), "tensor 'w': key 'dtype' appears twice");
  EXPECT_CONTAINS(reject(R"({"__metadata__":{"k":"a","k":"b"}})"), "__metadata__ key 'k' appears twice");
}

}  // namespace
}  // namespace fp4serve
