#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace fp4serve {
namespace {

using json = nlohmann::json;

constexpr std::uint64_t kPrefixBytes = 8;
// The schema needs three levels (root object, tensor entry, shape array). Unknown fields may nest
// a little more; anything deeper is rejected before the parser builds it.
constexpr int kMaxJsonDepth = 16;

template <class... Parts>
[[noreturn]] void tensor_fail(std::string_view source, std::string_view tensor, const Parts&... parts) {
  fail(source, ": tensor '", tensor, "': ", parts...);
}

std::string supported_dtypes() {
  std::string out;
  for (int i = 0; i <= static_cast<int>(DType::BOOL); ++i) {
    if (!out.empty()) out += ", ";
    out += dtype_name(static_cast<DType>(i));
  }
  return out;
}

// Builds the DOM in one pass while rejecting keys that appear twice in one object (the DOM would
// silently keep one of them) and absurd nesting (which would cost memory, not add meaning).
// nlohmann's callback parser would do the same but rescans the parent object at the end of every
// child, which is quadratic in the number of tensors (minutes for a 75k-tensor shard).
class CheckedDomParser : public nlohmann::detail::json_sax_dom_parser<json> {
  using Base = nlohmann::detail::json_sax_dom_parser<json>;

 public:
  CheckedDomParser(json& result, std::string_view source) : Base(result, true), source_(source) {}

  bool start_object(std::size_t n) {
    open();
    return Base::start_object(n);
  }
  bool end_object() {
    keys_.pop_back();
    return Base::end_object();
  }
  bool start_array(std::size_t n) {
    open();
    return Base::start_array(n);
  }
  bool end_array() {
    keys_.pop_back();
    return Base::end_array();
  }
  bool key(json::string_t& key) {
    const std::size_t depth = keys_.size();  // 1 = a key of the root object
    if (depth == 1) entry_ = key;
    if (!keys_.back().insert(key).second) {
      if (depth == 1 && key == "__metadata__") fail(source_, ": '__metadata__' appears twice in the header");
      if (depth == 1) fail(source_, ": tensor '", key, "' is declared twice in the header");
      if (entry_ == "__metadata__") fail(source_, ": __metadata__ key '", key, "' appears twice");
      tensor_fail(source_, entry_, "key '", key, "' appears twice in its entry");
    }
    return Base::key(key);
  }

 private:
  void open() {
    if (keys_.size() >= static_cast<std::size_t>(kMaxJsonDepth))
      fail(source_, ": header JSON nests more than ", kMaxJsonDepth, " levels deep");
    keys_.emplace_back();
  }
  std::string_view source_;
  std::vector<std::set<std::string>> keys_;  // keys seen in each open container
  std::string entry_;                        // root-level key whose value is being parsed
};

json parse_json(std::string_view text, std::string_view source) {
  json result;
  CheckedDomParser parser(result, source);
  try {
    json::sax_parse(text.begin(), text.end(), &parser);
  } catch (const json::exception& e) {
    // parse_error for bad syntax or UTF-8; out_of_range for numbers beyond a double.
    fail(source, ": header is not valid JSON: ", e.what());
  }
  return result;
}

// A JSON non-negative integer that fits `max`; `what` describes the value in the error.
std::uint64_t get_uint(const json& value, std::uint64_t max, std::string_view source,
                       std::string_view tensor, std::string_view what) {
  if (value.is_number_unsigned()) {
    const auto v = value.get<std::uint64_t>();
    if (v > max) tensor_fail(source, tensor, what, " is too large (", v, ")");
    return v;
  }
  if (value.is_number_integer()) tensor_fail(source, tensor, what, " is negative (", value.get<std::int64_t>(), ")");
  tensor_fail(source, tensor, what, " is not an integer (it is ", value.dump(), ")");
}

const json& field(const json& entry, const char* key, std::string_view source, std::string_view tensor) {
  auto it = entry.find(key);
  if (it == entry.end()) tensor_fail(source, tensor, "entry has no '", key, "'");
  return *it;
}

TensorInfo parse_tensor(const std::string& name, const json& entry, std::uint64_t data_size,
                        std::string_view source) {
  if (!entry.is_object()) tensor_fail(source, name, "entry is not a JSON object (it is ", entry.type_name(), ")");
  TensorInfo t;
  t.name = name;

  const json& dtype = field(entry, "dtype", source, name);
  if (!dtype.is_string()) tensor_fail(source, name, "'dtype' is not a string (it is ", dtype.dump(), ")");
  const auto& dtype_str = dtype.get_ref<const std::string&>();
  auto parsed = dtype_from_name(dtype_str);
  if (!parsed) tensor_fail(source, name, "unknown dtype '", dtype_str, "' (supported: ", supported_dtypes(), ")");
  t.dtype = *parsed;

  const json& shape = field(entry, "shape", source, name);
  if (!shape.is_array()) tensor_fail(source, name, "'shape' is not an array (it is ", shape.dump(), ")");
  t.shape.reserve(shape.size());
  for (std::size_t i = 0; i < shape.size(); ++i) {
    const std::string what = "shape dimension " + std::to_string(i);
    const auto max_dim = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    t.shape.push_back(static_cast<std::int64_t>(get_uint(shape[i], max_dim, source, name, what)));
  }
  const auto need = shape_nbytes(t.dtype, t.shape);
  if (!need) {
    tensor_fail(source, name, "shape ", shape_to_string(t.shape), " of ", dtype_name(t.dtype),
                " overflows: the tensor would exceed ", kMaxTensorBytes, " bytes");
  }

  const json& offsets = field(entry, "data_offsets", source, name);
  if (!offsets.is_array() || offsets.size() != 2) {
    tensor_fail(source, name, "'data_offsets' is not an array of two integers (it is ", offsets.dump(), ")");
  }
  const auto max_off = std::numeric_limits<std::uint64_t>::max();
  t.begin = get_uint(offsets[0], max_off, source, name, "data_offsets[0]");
  t.end = get_uint(offsets[1], max_off, source, name, "data_offsets[1]");
  if (t.begin > t.end) {
    tensor_fail(source, name, "data_offsets [", t.begin, ", ", t.end, "] are reversed (begin > end)");
  }
  if (t.end > data_size) {
    tensor_fail(source, name, "data_offsets [", t.begin, ", ", t.end, "] run past the end of the ",
                data_size, "-byte data section (truncated file?)");
  }
  if (t.nbytes() != *need) {
    tensor_fail(source, name, "data_offsets [", t.begin, ", ", t.end, "] span ", t.nbytes(),
                " bytes but shape ", shape_to_string(t.shape), " of ", dtype_name(t.dtype), " needs ", *need);
  }
  return t;
}

std::map<std::string, std::string> parse_metadata(const json& meta, std::string_view source) {
  std::map<std::string, std::string> out;
  if (meta.is_null()) return out;  // the reference implementation reads null as "no metadata"
  if (!meta.is_object()) fail(source, ": __metadata__ is not a JSON object (it is ", meta.type_name(), ")");
  for (const auto& [key, value] : meta.items()) {
    if (!value.is_string()) {
      fail(source, ": __metadata__ value of '", key, "' is not a string (it is ", value.dump(), ")");
    }
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// The rule of the reference (Rust) implementation: sorted by offset, the tensors tile the data
// section exactly, with no overlap, no hole and nothing after the last one.
void check_layout(const std::vector<TensorInfo>& tensors, std::uint64_t data_size, std::string_view source) {
  std::uint64_t pos = 0;
  const TensorInfo* prev = nullptr;
  for (const auto& t : tensors) {
    if (t.begin < pos) {
      tensor_fail(source, t.name, "data [", t.begin, ", ", t.end, ") overlaps tensor '", prev->name, "' [",
                  prev->begin, ", ", prev->end, ")");
    }
    if (t.begin > pos) {
      if (prev == nullptr) {
        tensor_fail(source, t.name, "data begins at offset ", t.begin, ", leaving a ", t.begin,
                    "-byte hole at the start of the data section (tensors must cover it contiguously)");
      }
      tensor_fail(source, t.name, "data begins at offset ", t.begin, " but tensor '", prev->name, "' ends at ",
                  pos, ": a ", t.begin - pos, "-byte hole (tensors must cover the data section contiguously)");
    }
    pos = t.end;
    prev = &t;
  }
  if (pos != data_size) {
    if (prev == nullptr) {
      fail(source, ": the header declares no tensors but the data section holds ", data_size, " bytes");
    }
    fail(source, ": ", data_size - pos, " stray bytes after the last tensor '", prev->name,
         "' (data section is ", data_size, " bytes, tensors cover ", pos, ")");
  }
}

}  // namespace

std::int64_t TensorInfo::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n *= d;
  return n;
}

SafetensorsHeader parse_safetensors_header(std::string_view text, std::uint64_t data_size,
                                           std::string_view source) {
  const json doc = parse_json(text, source);
  if (!doc.is_object()) fail(source, ": header is not a JSON object (it is ", doc.type_name(), ")");

  SafetensorsHeader header;
  header.header_size = text.size();
  header.data_size = data_size;
  for (const auto& [name, entry] : doc.items()) {
    if (name == "__metadata__") {
      header.metadata = parse_metadata(entry, source);
    } else {
      header.tensors.push_back(parse_tensor(name, entry, data_size, source));
    }
  }
  std::sort(header.tensors.begin(), header.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  check_layout(header.tensors, data_size, source);
  return header;
}

SafetensorsHeader parse_safetensors_image(std::span<const std::uint8_t> image, std::string_view source) {
  if (image.size() < kPrefixBytes) {
    fail(source, ": file is ", image.size(), " bytes, too short for the 8-byte header length (not safetensors?)");
  }
  std::uint64_t n = 0;
  for (std::size_t i = 0; i < kPrefixBytes; ++i) n |= static_cast<std::uint64_t>(image[i]) << (8 * i);
  if (n > kMaxSafetensorsHeaderBytes) {
    fail(source, ": header length ", n, " exceeds the ", kMaxSafetensorsHeaderBytes,
         "-byte limit (corrupt file or not safetensors?)");
  }
  const std::uint64_t rest = image.size() - kPrefixBytes;
  if (n > rest) {
    fail(source, ": header length ", n, " runs past the end of the ", image.size(), "-byte file (truncated?)");
  }
  const auto* json_begin = reinterpret_cast<const char*>(image.data() + kPrefixBytes);
  return parse_safetensors_header(std::string_view(json_begin, static_cast<std::size_t>(n)), rest - n, source);
}

SafetensorsFile SafetensorsFile::open(const std::filesystem::path& path) {
  SafetensorsFile f;
  f.file_ = MappedFile(path);
  f.header_ = parse_safetensors_image(f.file_.bytes(), path.string());
  return f;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  for (const auto& t : header_.tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

std::span<const std::uint8_t> SafetensorsFile::data(const TensorInfo& tensor) const {
  if (tensor.begin > tensor.end || tensor.end > header_.data_size) {
    fail(path().string(), ": tensor '", tensor.name, "': offsets [", tensor.begin, ", ", tensor.end,
         "] are outside this file's data section");
  }
  const std::uint64_t start = kPrefixBytes + header_.header_size + tensor.begin;
  return file_.bytes().subspan(static_cast<std::size_t>(start), static_cast<std::size_t>(tensor.nbytes()));
}

}  // namespace fp4serve
