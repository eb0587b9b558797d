#pragma once
// One safetensors file: 8-byte little-endian header length, a JSON header, then the data section.
// Everything is validated when the file is opened, so a TensorInfo handed out is always in bounds.
#include <cstdint>
#include <filesystem>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/dtype.h"
#include "util/mapped_file.h"

namespace fp4serve {

struct TensorInfo {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;  // empty = scalar
  std::uint64_t begin = 0;          // offsets into the data section (after the header)
  std::uint64_t end = 0;

  std::int64_t numel() const;
  std::uint64_t nbytes() const { return end - begin; }
};

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;  // sorted by begin offset
  std::map<std::string, std::string> metadata;
  std::uint64_t header_size = 0;     // JSON bytes, excluding the 8-byte length prefix
  std::uint64_t data_size = 0;       // bytes of the data section (= end of the last tensor)
};

// Header JSON larger than this is rejected before anything is allocated for it.
inline constexpr std::uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Parses and validates the JSON header. `data_size` is the length of the data section;
// `source` (usually the file path) prefixes every error message.
// The plain layout every writer produces goes through simdjson (safetensors_plain_header.h); the
// rest through the checked parser below, so the result and every error are the checked parser's.
SafetensorsHeader parse_safetensors_header(std::string_view json, std::uint64_t data_size,
                                           std::string_view source);
// The checked parser alone (nlohmann, one small DOM per entry): the reference the quick path is
// tested and fuzzed against.
SafetensorsHeader parse_safetensors_header_checked(std::string_view json, std::uint64_t data_size,
                                                   std::string_view source);

// Parses a whole file image (length prefix + header + data). Used by open() and by the fuzzer.
SafetensorsHeader parse_safetensors_image(std::span<const std::uint8_t> image, std::string_view source);

class SafetensorsFile {
 public:
  static SafetensorsFile open(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return file_.path(); }
  const SafetensorsHeader& header() const { return header_; }
  const std::vector<TensorInfo>& tensors() const { return header_.tensors; }
  // nullptr when the file has no tensor of that name (linear scan).
  const TensorInfo* find(std::string_view name) const;
  // Bytes of one tensor; touching them is what pages the data in.
  std::span<const std::uint8_t> data(const TensorInfo& tensor) const;

 private:
  MappedFile file_;
  SafetensorsHeader header_;
};

}  // namespace fp4serve
