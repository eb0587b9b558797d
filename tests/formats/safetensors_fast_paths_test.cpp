// The quick readers of big checkpoints' JSON (simdjson): a safetensors header's plain layout and the
// shard index's weight_map. Each must take the plain layout itself (or it gains nothing) and hand
// everything else to the checked nlohmann parser, so that the result and every error message are
// exactly the checked parser's.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "formats/dtype.h"
#include "formats/safetensors.h"
#include "formats/safetensors_index.h"
#include "formats/safetensors_plain_header.h"
#include "formats/st_builder.h"

namespace fp4serve {
namespace {

using st_test::error_of;
using st_test::TempDir;
using st_test::write_bytes;

struct Outcome {
  SafetensorsHeader header;
  std::string error;
};

template <class Parse>
Outcome outcome_of(Parse parse) {
  Outcome o;
  try {
    o.header = parse();
  } catch (const Error& e) {
    o.error = e.what();
  }
  return o;
}

// parse_safetensors_header (quick path first) and the checked parser alone agree on everything.
void expect_same_as_checked(const std::string& json, std::uint64_t data_size) {
  const Outcome quick = outcome_of([&] { return parse_safetensors_header(json, data_size, "h.safetensors"); });
  const Outcome checked =
      outcome_of([&] { return parse_safetensors_header_checked(json, data_size, "h.safetensors"); });
  EXPECT_EQ(quick.error, checked.error);
  EXPECT_EQ(quick.header.metadata, checked.header.metadata);
  ASSERT_EQ(quick.header.tensors.size(), checked.header.tensors.size());
  for (std::size_t i = 0; i < quick.header.tensors.size(); ++i) {
    const TensorInfo &a = quick.header.tensors[i], &b = checked.header.tensors[i];
    EXPECT_EQ(a.name, b.name);
    EXPECT_EQ(a.dtype, b.dtype);
    EXPECT_EQ(a.shape, b.shape);
    EXPECT_EQ(a.begin, b.begin);
    EXPECT_EQ(a.end, b.end);
  }
}

// A header as a writer lays it out, with names and metadata that need JSON escapes; returns the
// JSON and the data section's size.
std::pair<std::string, std::uint64_t> random_plain_header(std::mt19937& rng) {
  const char* dtypes[] = {"F32", "BF16", "F16", "F8_E4M3", "U8", "I64", "BOOL"};
  const char* names[] = {"model.layers.0.mlp.experts.7.down_proj.weight", "lm_head.weight", "w\\\"quoted\\\"",
                         "caf\\u00e9", "a/b\\\\c", "x"};
  std::string json = "{";
  const int meta = static_cast<int>(rng() % 3);  // none, null, a map
  if (meta == 1) json += "\"__metadata__\":null,";
  if (meta == 2) json += "\"__metadata__\":{\"format\":\"pt\",\"note\":\"tab\\there\"},";
  const int count = static_cast<int>(rng() % 12);
  std::uint64_t offset = 0;
  for (int i = 0; i < count; ++i) {
    const char* dtype = dtypes[rng() % 7];
    std::vector<std::int64_t> shape;
    for (int d = static_cast<int>(rng() % 4); d > 0; --d) shape.push_back(static_cast<std::int64_t>(rng() % 5));
    const std::uint64_t bytes = *shape_nbytes(*dtype_from_name(dtype), shape);
    json += std::string(i > 0 ? "," : "") + "\"" + names[rng() % 6] + "." + std::to_string(i) + "\":{\"dtype\":\"" +
            dtype + "\",\"shape\":[";
    for (std::size_t d = 0; d < shape.size(); ++d) json += (d ? "," : "") + std::to_string(shape[d]);
    json += "],\"data_offsets\":[" + std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  if (count == 0 && meta != 0) json.pop_back();  // the comma after __metadata__
  return {json + "}", offset};
}

TEST(SafetensorsPlainHeader, TakesEveryWritersLayoutItselfAndAgreesWithTheCheckedParser) {
  std::mt19937 rng(7);
  for (int round = 0; round < 200; ++round) {
    const auto [json, data_size] = random_plain_header(rng);
    SCOPED_TRACE(json);
    const auto plain = parse_plain_safetensors_header(json, data_size);
    ASSERT_TRUE(plain.has_value());
    expect_same_as_checked(json, data_size);
  }
  // The escapes come out decoded.
  const auto plain = parse_plain_safetensors_header(
      R"({"__metadata__":{"k":"v\"1"},"caf\u00e9":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}})", 2);
  ASSERT_TRUE(plain.has_value());
  ASSERT_EQ(plain->tensors.size(), 1u);
  EXPECT_EQ(plain->tensors[0].name, "caf\xc3\xa9");
  EXPECT_EQ(plain->metadata.at("k"), "v\"1");
}

TEST(SafetensorsPlainHeader, HandsEverythingElseToTheCheckedParser) {
  const std::string ok = R"("dtype":"U8","shape":[4],"data_offsets":[0,4])";
  const std::vector<std::string> unusual = {
      "{\"t\":{" + ok + ",\"extra\":1}}",                                  // an unknown field (accepted)
      "{\"t\":{" + ok + ",\"dtype\":\"U8\"}}",                             // a field twice
      R"({"t":{"dtype":"U8","shape":[-4],"data_offsets":[0,4]}})",         // negative dimension
      R"({"t":{"dtype":"U8","shape":[4.0],"data_offsets":[0,4]}})",        // a float
      R"({"t":{"dtype":"U8","shape":[9223372036854775808],"data_offsets":[0,4]}})",  // past int64
      R"({"t":{"dtype":"U8","shape":4,"data_offsets":[0,4]}})",            // shape not an array
      R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,4,4]}})",        // three offsets
      R"({"t":{"dtype":"U4","shape":[4],"data_offsets":[0,4]}})",          // unknown dtype
      R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[4,0]}})",          // reversed
      R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[0,3]}})",          // span != shape
      R"({"t":{"dtype":"U8","shape":[4],"data_offsets":[4,8]}})",          // past the data
      R"({"t":{"dtype":"U8","shape":[4]}})",                               // a field missing
      "{\"t\":{" + ok + "},\"t\":{" + ok + "}}",                           // a name twice
      "{\"__metadata__\":{\"a\":1},\"t\":{" + ok + "}}",                   // metadata not a string
      "{\"__metadata__\":{\"a\":{}},\"t\":{" + ok + "}}",                  // metadata nested
      "{\"__metadata__\":null,\"__metadata__\":null,\"t\":{" + ok + "}}",  // metadata twice
      "{\"__metadata__\":{\"a\":\"x\",\"a\":\"y\"},\"t\":{" + ok + "}}",   // a metadata key twice
      "{\"t\":{" + ok + "}} x",                                            // trailing bytes
      "{\"t\":{" + ok + "}",                                               // cut short
      "[{\"t\":{" + ok + "}}]",                                            // not an object
      "{\"t\":[]}",                                                        // entry not an object
      "{\"t\xff\":{" + ok + "}}",                                          // invalid UTF-8
  };
  for (const std::string& json : unusual) {
    SCOPED_TRACE(json);
    EXPECT_FALSE(parse_plain_safetensors_header(json, 4).has_value());
    expect_same_as_checked(json, 4);
  }
  // Across tensors the quick path checks nothing: the shared layout rule does, with the same words.
  const std::string hole = R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},)"
                           R"("b":{"dtype":"U8","shape":[1],"data_offsets":[3,4]}})";
  EXPECT_TRUE(parse_plain_safetensors_header(hole, 4).has_value());
  EXPECT_NE(error_of([&] { parse_safetensors_header(hole, 4, "h.safetensors"); }).find("1-byte hole"), std::string::npos);
  expect_same_as_checked(hole, 4);
}

std::vector<std::pair<std::string, std::string>> sorted_pairs(const std::vector<WeightMapEntry>& entries) {
  std::vector<std::pair<std::string, std::string>> out;
  for (const WeightMapEntry& e : entries) out.emplace_back(e.tensor, e.shard);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(SafetensorsIndexPlain, ReadsTheWeightMapInOnePassAndChecksTheRestAsJson) {
  const std::string json = R"({"metadata":{"total_size":123,"list":[1,2.5,true,null,{"x":"y"}]},)"
                           R"("weight_map":{"b.weight":"model-00002-of-00002.safetensors",)"
                           R"("caf\u00e9":"model-00001-of-00002.safetensors"},"trailer":false})";
  const auto plain = parse_plain_weight_map(json);
  ASSERT_TRUE(plain.has_value());
  const std::vector<std::pair<std::string, std::string>> want = {
      {"b.weight", "model-00002-of-00002.safetensors"}, {"caf\xc3\xa9", "model-00001-of-00002.safetensors"}};
  EXPECT_EQ(sorted_pairs(*plain), want);

  TempDir dir;
  EXPECT_EQ(sorted_pairs(read_weight_map(write_bytes(dir.path() / "plain.json", json))), want);
}

TEST(SafetensorsIndexPlain, LeavesTheUnusualAndTheWrongToTheDom) {
  TempDir dir;
  // A tensor listed twice: the DOM keeps the last, as it always did.
  const std::string twice = R"({"weight_map":{"a":"one.safetensors","a":"two.safetensors"}})";
  EXPECT_FALSE(parse_plain_weight_map(twice).has_value());
  const auto entries = read_weight_map(write_bytes(dir.path() / "twice.json", twice));
  ASSERT_EQ(entries.size(), 1u);
  EXPECT_EQ(entries[0].shard, "two.safetensors");

  struct Case {
    std::string json, error;
  };
  const std::vector<Case> wrong = {
      {R"({"metadata":{"total_size":tru},"weight_map":{"a":"s"}})", "not valid JSON"},  // in a skipped value
      {R"({"weight_map":{"a":7}})", "tensor 'a': weight_map value is not a file name (it is 7)"},
      {R"({"weight_map":{"a":{"f":"s"}}})", "tensor 'a': weight_map value is not a file name"},
      {R"({"weight_map":["a"]})", "'weight_map' is not an object (it is array)"},
      {R"({"weight_map":{}})", "'weight_map' is empty: no weights"},
      {R"({"metadata":{}})", "has no 'weight_map'"},
      {R"(["weight_map"])", "not a JSON object (it is array)"},
      {R"({"weight_map":{"a":"s"}} {})", "not valid JSON"},
  };
  for (const Case& c : wrong) {
    SCOPED_TRACE(c.json);
    EXPECT_FALSE(parse_plain_weight_map(c.json).has_value());
    const auto path = write_bytes(dir.path() / "index.json", c.json);
    const std::string error = error_of([&] { read_weight_map(path); });
    EXPECT_NE(error.find(path.string()), std::string::npos) << error;
    EXPECT_NE(error.find(c.error), std::string::npos) << error;
  }
}

}  // namespace
}  // namespace fp4serve
