// libFuzzer target for the safetensors header parser. Any input must either parse into a header
// that satisfies every invariant the reader promises, or throw fp4serve::Error. Anything else
// (another exception type, a crash, a sanitizer report, a broken invariant) is a bug.
//
// Each input is tried twice: as a whole file image (length prefix + JSON + data), which is what
// SafetensorsFile::open sees, and as bare header JSON with a data section of 4096 bytes, so that
// mutations of the JSON are not all lost to a length prefix that no longer matches. The bare JSON
// also goes through the checked parser alone: the quick path (simdjson) must never change the
// outcome, neither the header nor the error message.
#include <cstdint>
#include <cstdlib>
#include <span>
#include <string>
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
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  std::string error, checked_error;
  fp4serve::SafetensorsHeader h, checked;
  try {
    h = fp4serve::parse_safetensors_header(text, 4096, "fuzz-header");
    check(h.data_size == 4096 && h.header_size == size);
    check_invariants(h);
  } catch (const fp4serve::Error& e) {
    error = e.what();
  }
  try {
    checked = fp4serve::parse_safetensors_header_checked(text, 4096, "fuzz-header");
  } catch (const fp4serve::Error& e) {
    checked_error = e.what();
  }
  check(error == checked_error && h.metadata == checked.metadata && h.tensors.size() == checked.tensors.size());
  for (std::size_t i = 0; i < h.tensors.size(); ++i) {
    const auto &a = h.tensors[i], &b = checked.tensors[i];
    check(a.name == b.name && a.dtype == b.dtype && a.shape == b.shape && a.begin == b.begin && a.end == b.end);
  }
  return 0;
}
