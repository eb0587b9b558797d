// libFuzzer target for the safetensors header parser. Any input must either parse into a header
// that satisfies every invariant the reader promises, or throw fp4serve::Error. Anything else
// (another exception type, a crash, a sanitizer report, a broken invariant) is a bug.
//
// Each input is tried twice: as a whole file image (length prefix + JSON + data), which is what
// SafetensorsFile::open sees, and as bare header JSON with a data section of 4096 bytes, so that
// mutations of the JSON are not all lost to a length prefix that no longer matches.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string_view>

#include "formats/dtype.h"
#include "formats/safetensors.h"
#include "util/error.h"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void check_invariants(const fp4serve::SafetensorsHeader& h) {
  std::uint64_t pos = 0;
  for (const auto& t : h.tensors) {
    check(t.begin == pos && t.begin <= t.end && t.end <= h.data_size);  // contiguous, in bounds
    const auto need = fp4serve::shape_nbytes(t.dtype, t.shape);
    check(need.has_value() && *need == t.nbytes());
    for (std::int64_t d : t.shape) check(d >= 0);
    check(t.numel() >= 0);
    pos = t.end;
  }
  check(pos == h.data_size);
  check(h.header_size <= fp4serve::kMaxSafetensorsHeaderBytes);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const auto h = fp4serve::parse_safetensors_image(std::span(data, size), "fuzz-image");
    check(8 + h.header_size + h.data_size == size);
    check_invariants(h);
  } catch (const fp4serve::Error&) {
  }
  try {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    const auto h = fp4serve::parse_safetensors_header(text, 4096, "fuzz-header");
    check(h.data_size == 4096 && h.header_size == size);
    check_invariants(h);
  } catch (const fp4serve::Error&) {
  }
  return 0;
}
