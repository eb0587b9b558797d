#include "formats/safetensors_plain_header.h"

#include <algorithm>
#include <limits>

#include <simdjson.h>

namespace fp4serve {
namespace {

namespace dom = simdjson::dom;

// "__metadata__": strings to strings, or null for none (as the reference implementation reads it).
bool read_metadata(dom::element v, std::map<std::string, std::string>& out) {
  if (v.is_null()) return true;
  dom::object obj;
  if (v.get_object().get(obj)) return false;
  for (const dom::key_value_pair field : obj) {
    std::string_view text;
    if (field.value.get_string().get(text) || !out.emplace(field.key, text).second) return false;
  }
  return true;
}

// A JSON array of unsigned integers that fit int64 (the checked parser's bound for shapes).
bool read_uints(dom::element v, std::vector<std::uint64_t>& out) {
  dom::array arr;
  if (v.get_array().get(arr)) return false;
  for (const dom::element e : arr) {
    std::uint64_t n = 0;
    if (e.get_uint64().get(n) || n > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) return false;
    out.push_back(n);
  }
  return true;
}

// Exactly "dtype", "shape" and "data_offsets", each once, and the same per-tensor checks as the
// checked parser.
bool read_tensor(dom::element v, TensorInfo& t, std::uint64_t data_size) {
  dom::object obj;
  if (v.get_object().get(obj)) return false;
  bool dtype = false, shape = false, offsets = false;
  std::vector<std::uint64_t> numbers;
  for (const dom::key_value_pair field : obj) {
    const std::string_view key = field.key;
    if (key == "dtype" && !dtype) {
      std::string_view name;
      if (field.value.get_string().get(name)) return false;
      const auto parsed = dtype_from_name(name);
      if (!parsed) return false;
      t.dtype = *parsed;
      dtype = true;
    } else if (key == "shape" && !shape) {
      numbers.clear();
      if (!read_uints(field.value, numbers)) return false;
      t.shape.assign(numbers.begin(), numbers.end());
      shape = true;
    } else if (key == "data_offsets" && !offsets) {
      numbers.clear();
      if (!read_uints(field.value, numbers) || numbers.size() != 2) return false;
      t.begin = numbers[0];
      t.end = numbers[1];
      offsets = true;
    } else {
      return false;  // unknown or repeated field
    }
  }
  if (!dtype || !shape || !offsets) return false;
  const auto need = shape_nbytes(t.dtype, t.shape);
  return need && t.begin <= t.end && t.end <= data_size && t.nbytes() == *need;
}

bool read_header(dom::element doc, std::uint64_t data_size, PlainSafetensorsHeader& out) {
  dom::object root;
  if (doc.get_object().get(root)) return false;
  bool metadata = false;
  for (const dom::key_value_pair field : root) {
    const std::string_view key = field.key;
    if (key == "__metadata__") {
      if (metadata || !read_metadata(field.value, out.metadata)) return false;
      metadata = true;
      continue;
    }
    TensorInfo& t = out.tensors.emplace_back();
    t.name = key;
    if (!read_tensor(field.value, t, data_size)) return false;
  }
  return true;
}

}  // namespace

std::optional<PlainSafetensorsHeader> parse_plain_safetensors_header(std::string_view text, std::uint64_t data_size) {
  const simdjson::padded_string padded(text);
  dom::parser parser;
  dom::element doc;
  PlainSafetensorsHeader out;
  if (parser.parse(padded).get(doc) || !read_header(doc, data_size, out)) return std::nullopt;
  // A name declared twice: the checked parser says which.
  std::vector<std::string_view> names;
  names.reserve(out.tensors.size());
  for (const TensorInfo& t : out.tensors) names.push_back(t.name);
  std::sort(names.begin(), names.end());
  if (std::adjacent_find(names.begin(), names.end()) != names.end()) return std::nullopt;
  return out;
}

}  // namespace fp4serve
