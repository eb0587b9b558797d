#include "formats/safetensors_index.h"

#include <optional>
#include <string_view>
#include <unordered_set>

#include <nlohmann/json.hpp>
#include <simdjson.h>

#include "util/error.h"
#include "util/mapped_file.h"

namespace fp4serve {
namespace {

using json = nlohmann::json;

namespace dom = simdjson::dom;

// The plain layout: a root object whose "weight_map" maps names to strings; other root keys are
// skipped (simdjson has checked the whole document as JSON). Anything else returns false.
bool read_plain_into(dom::element doc, std::vector<WeightMapEntry>& out) {
  dom::object root;
  if (doc.get_object().get(root)) return false;
  bool seen_map = false;
  for (const dom::key_value_pair field : root) {
    if (field.key != "weight_map") continue;
    dom::object map;
    if (seen_map || field.value.get_object().get(map)) return false;  // twice, or not an object
    seen_map = true;
    out.reserve(map.size());
    for (const dom::key_value_pair entry : map) {
      std::string_view shard;
      if (entry.value.get_string().get(shard)) return false;
      out.push_back({std::string(entry.key), std::string(shard)});
    }
  }
  return seen_map;
}

}  // namespace

std::optional<std::vector<WeightMapEntry>> parse_plain_weight_map(std::string_view text) {
  const simdjson::padded_string padded(text);
  dom::parser parser;
  dom::element doc;
  std::vector<WeightMapEntry> out;
  if (parser.parse(padded).get(doc) || !read_plain_into(doc, out) || out.empty()) return std::nullopt;
  // A tensor listed twice: the DOM keeps the last, as before this fast path existed.
  std::unordered_set<std::string_view> names;
  names.reserve(out.size());
  for (const WeightMapEntry& e : out)
    if (!names.insert(e.tensor).second) return std::nullopt;
  return out;
}

std::vector<WeightMapEntry> parse_weight_map_checked(std::string_view text, std::string_view where) {
  json index;
  try {
    index = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    fail(where, ": not valid JSON: ", e.what());
  }
  if (!index.is_object()) fail(where, ": not a JSON object (it is ", index.type_name(), ")");
  auto wm = index.find("weight_map");
  if (wm == index.end()) fail(where, ": has no 'weight_map'");
  if (!wm->is_object()) fail(where, ": 'weight_map' is not an object (it is ", wm->type_name(), ")");
  if (wm->empty()) fail(where, ": 'weight_map' is empty: no weights");
  std::vector<WeightMapEntry> out;
  for (const auto& [tensor, shard] : wm->items()) {
    if (!shard.is_string()) {
      fail(where, ": tensor '", tensor, "': weight_map value is not a file name (it is ", shard.dump(), ")");
    }
    out.push_back({tensor, shard.get<std::string>()});
  }
  return out;
}

std::vector<WeightMapEntry> parse_weight_map(std::string_view text, std::string_view where) {
  if (auto plain = parse_plain_weight_map(text)) return std::move(*plain);
  return parse_weight_map_checked(text, where);
}

std::vector<WeightMapEntry> read_weight_map(const std::filesystem::path& index_path) {
  const MappedFile file(index_path);
  const auto bytes = file.bytes();
  return parse_weight_map(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()), index_path.string());
}

}  // namespace fp4serve
