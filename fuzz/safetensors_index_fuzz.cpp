// libFuzzer target for model.safetensors.index.json. Any input must either yield weight_map
// entries or throw fp4serve::Error, and the quick reader (simdjson, the plain layout only) must
// never change the outcome: parse_weight_map and the checked nlohmann reader alone give the same
// entries (in any order) or the same error message.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "formats/safetensors_index.h"
#include "util/error.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

struct Outcome {
  std::vector<std::pair<std::string, std::string>> entries;  // sorted
  std::string error;
};

template <class Parse>
Outcome outcome_of(Parse parse) {
  Outcome o;
  try {
    for (const auto& e : parse()) o.entries.emplace_back(e.tensor, e.shard);
    std::sort(o.entries.begin(), o.entries.end());
  } catch (const fp4serve::Error& e) {
    o.error = e.what();
  }
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const Outcome quick = outcome_of([&] { return fp4serve::parse_weight_map(text, "fuzz-index"); });
  const Outcome checked = outcome_of([&] { return fp4serve::parse_weight_map_checked(text, "fuzz-index"); });
  check(quick.error == checked.error && quick.entries == checked.entries);
  check(!quick.error.empty() || !quick.entries.empty());  // a result has at least one entry
  for (std::size_t i = 1; i < quick.entries.size(); ++i) check(quick.entries[i - 1].first != quick.entries[i].first);
  return 0;
}
