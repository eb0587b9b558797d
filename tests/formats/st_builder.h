#pragma once
// Test helpers for crafting safetensors files byte by byte, independently of SafetensorsWriter, so
// the reader tests do not trust the writer and malformed files are easy to spell out.
#include "common/temp_dir.h"
#include <stdlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <gtest/gtest.h>

#include "util/error.h"

namespace fp4serve::st_test {

namespace fs = std::filesystem;

using fp4serve::testing::TempDir;

// 8-byte little-endian length, then the header text exactly as given (no padding), then `data`.
inline std::string st_image(std::string_view header, std::string_view data = {}) {
  std::string out;
  const auto n = static_cast<std::uint64_t>(header.size());
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((n >> (8 * i)) & 0xff));
  out.append(header);
  out.append(data);
  return out;
}

// Same, with an arbitrary (possibly lying) length prefix.
inline std::string st_image_with_length(std::uint64_t declared, std::string_view rest) {
  std::string out;
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((declared >> (8 * i)) & 0xff));
  out.append(rest);
  return out;
}

inline fs::path write_bytes(const fs::path& path, std::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
  return path;
}

inline fs::path write_st(const fs::path& path, std::string_view header, std::string_view data = {}) {
  return write_bytes(path, st_image(header, data));
}

// A well-formed tensor for st_file(): `nbytes` bytes of data, each byte `fill`.
struct RawTensor {
  std::string name;
  std::string dtype;
  std::vector<std::int64_t> shape;
  std::size_t nbytes = 0;
  char fill = 0;
};

// A valid file holding `tensors` back to back in the given order.
inline fs::path st_file(const fs::path& path, std::initializer_list<RawTensor> tensors) {
  std::string header = "{";
  std::string data;
  for (const auto& t : tensors) {
    if (header.size() > 1) header += ",";
    header += "\"" + t.name + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":[";
    for (std::size_t i = 0; i < t.shape.size(); ++i) header += (i ? "," : "") + std::to_string(t.shape[i]);
    header += "],\"data_offsets\":[" + std::to_string(data.size()) + "," +
              std::to_string(data.size() + t.nbytes) + "]}";
    data.append(t.nbytes, t.fill);
  }
  header += "}";
  return write_st(path, header, data);
}

inline ::testing::AssertionResult contains_format(const char* text_expr, const char* part_expr,
                                                 std::string_view text, std::string_view part) {
  if (text.find(part) != std::string_view::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << text_expr << " does not contain " << part_expr << "\n  text: \""
                                       << text << "\"\n  part: \"" << part << "\"";
}

// EXPECT_CONTAINS(message, "tensor 'w'"): substring check with a readable failure.
#define EXPECT_CONTAINS(text, part) EXPECT_PRED_FORMAT2(::fp4serve::st_test::contains_format, text, part)

// Runs `fn`, which must throw fp4serve::Error, and returns its message ("" and a test failure
// when it does not throw, or throws something else).
template <class Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw a non-fp4serve exception: " << e.what();
    return {};
  }
  ADD_FAILURE() << "did not throw";
  return {};
}

}  // namespace fp4serve::st_test
