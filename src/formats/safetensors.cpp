#include "formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <optional>
#include <unordered_set>
#include <limits>
#include <set>
#include <sstream>
#include <tuple>
#include <utility>

#include <nlohmann/json.hpp>

#include "formats/safetensors_plain_header.h"
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

// The header's root object, entry by entry in document order: (name, small DOM of its value).
using HeaderEntries = std::deque<std::pair<std::string, json>>;

// Streams the header: each root entry gets its own small DOM, so 75k tensors never go through one
// huge std::map (nlohmann's object type), which dominated `inspect` on real checkpoints. Also
// rejects keys that appear twice in one object (a DOM would silently keep one of them) and absurd
// nesting (which would cost memory, not add meaning).
class HeaderSax {
  using EntryParser = nlohmann::detail::json_sax_dom_parser<json>;

 public:
  HeaderSax(HeaderEntries& entries, std::string_view source) : entries_(entries), source_(source) {}

  bool null() { return root_value("null") || sub_->null(); }
  bool boolean(bool v) { return root_value("boolean") || sub_->boolean(v); }
  bool number_integer(json::number_integer_t v) { return root_value("number") || sub_->number_integer(v); }
  bool number_unsigned(json::number_unsigned_t v) { return root_value("number") || sub_->number_unsigned(v); }
  bool number_float(json::number_float_t v, const json::string_t& s) {
    return root_value("number") || sub_->number_float(v, s);
  }
  bool string(json::string_t& v) { return root_value("string") || sub_->string(v); }
  bool binary(json::binary_t& v) { return root_value("binary") || sub_->binary(v); }

  bool start_object(std::size_t n) {
    open();
    return keys_.size() == 1 || sub_->start_object(n);  // the root object itself is not stored
  }
  bool end_object() {
    keys_.pop_back();
    return keys_.empty() || sub_->end_object();
  }
  bool start_array(std::size_t n) {
    if (keys_.empty()) fail(source_, ": header is not a JSON object (it is array)");
    open();
    return sub_->start_array(n);
  }
  bool end_array() {
    keys_.pop_back();
    return sub_->end_array();
  }
  bool key(json::string_t& key) {
    const std::size_t depth = keys_.size();  // 1 = a key of the root object
    if (depth == 1) {
      entries_.emplace_back(std::move(key), json());  // deque: references to entries stay valid
      if (!root_keys_.insert(entries_.back().first).second) {
        if (entries_.back().first == "__metadata__") fail(source_, ": '__metadata__' appears twice in the header");
        fail(source_, ": tensor '", entries_.back().first, "' is declared twice in the header");
      }
      sub_.emplace(entries_.back().second, true);
      return true;
    }
    if (!keys_.back().insert(key).second) {
      const std::string& entry = entries_.back().first;
      if (entry == "__metadata__") fail(source_, ": __metadata__ key '", key, "' appears twice");
      tensor_fail(source_, entry, "key '", key, "' appears twice in its entry");
    }
    return sub_->key(key);
  }
  bool parse_error(std::size_t position, const std::string& token, const nlohmann::detail::exception& e) {
    return EntryParser(dummy_, true).parse_error(position, token, e);  // throws e
  }

 private:
  // A scalar where the root object should be is an error; elsewhere it belongs to an entry.
  bool root_value(const char* type) {
    if (keys_.empty()) fail(source_, ": header is not a JSON object (it is ", type, ")");
    return false;
  }
  void open() {
    if (keys_.size() >= static_cast<std::size_t>(kMaxJsonDepth))
      fail(source_, ": header JSON nests more than ", kMaxJsonDepth, " levels deep");
    keys_.emplace_back();
  }

  HeaderEntries& entries_;
  std::string_view source_;
  std::optional<EntryParser> sub_;                // builds the current root entry's value
  std::unordered_set<std::string_view> root_keys_;  // views of the entries' names; there may be 100k
  std::vector<std::set<std::string>> keys_;       // keys seen in each open container
  json dummy_;
};

HeaderEntries parse_json(std::string_view text, std::string_view source) {
  HeaderEntries entries;
  HeaderSax sax(entries, source);
  try {
    json::sax_parse(text.begin(), text.end(), &sax);
  } catch (const json::exception& e) {
    // parse_error for bad syntax or UTF-8; out_of_range for numbers beyond a double.
    fail(source, ": header is not valid JSON: ", e.what());
  }
  return entries;
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

namespace {

// Both parsers end here: tensors in offset order, and the layout rule checked.
SafetensorsHeader sorted_and_checked(SafetensorsHeader header, std::string_view source) {
  std::sort(header.tensors.begin(), header.tensors.end(), [](const TensorInfo& a, const TensorInfo& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  check_layout(header.tensors, header.data_size, source);
  return header;
}

}  // namespace

SafetensorsHeader parse_safetensors_header_checked(std::string_view text, std::uint64_t data_size,
                                                   std::string_view source) {
  const HeaderEntries entries = parse_json(text, source);
  SafetensorsHeader header;
  header.header_size = text.size();
  header.data_size = data_size;
  header.tensors.reserve(entries.size());
  for (const auto& [name, entry] : entries) {
    if (name == "__metadata__") {
      header.metadata = parse_metadata(entry, source);
    } else {
      header.tensors.push_back(parse_tensor(name, entry, data_size, source));
    }
  }
  return sorted_and_checked(std::move(header), source);
}

SafetensorsHeader parse_safetensors_header(std::string_view text, std::uint64_t data_size,
                                           std::string_view source) {
  auto plain = parse_plain_safetensors_header(text, data_size);
  if (!plain) return parse_safetensors_header_checked(text, data_size, source);  // unusual or wrong
  SafetensorsHeader header;
  header.header_size = text.size();
  header.data_size = data_size;
  header.tensors = std::move(plain->tensors);
  header.metadata = std::move(plain->metadata);
  return sorted_and_checked(std::move(header), source);
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
