#include "formats/safetensors_writer.h"

#include <cerrno>
#include <cstring>
#include <set>
#include <string_view>

#include <nlohmann/json.hpp>

#include "formats/safetensors.h"
#include "util/error.h"

namespace fp4serve {
namespace {

constexpr std::uint64_t kPrefixBytes = 8;

std::string errno_text() { return errno != 0 ? std::strerror(errno) : "I/O error"; }

}  // namespace

std::uint64_t tensor_nbytes(const TensorDecl& tensor) {
  for (std::int64_t d : tensor.shape) {
    if (d < 0) fail("tensor '", tensor.name, "': negative dimension ", d, " in its shape");
  }
  auto n = shape_nbytes(tensor.dtype, tensor.shape);
  if (!n) fail("tensor '", tensor.name, "': shape overflows: the tensor would exceed ", kMaxTensorBytes, " bytes");
  return *n;
}

SafetensorsWriter::SafetensorsWriter(const std::filesystem::path& path, std::vector<TensorDecl> tensors,
                                     const std::map<std::string, std::string>& metadata)
    : path_(path), tensors_(std::move(tensors)) {
  const std::string where = path_.string();
  // ordered_json keeps the declaration order, which is also the order of the data.
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::set<std::string_view> names;
  for (const auto& t : tensors_) {
    if (t.name == "__metadata__") fail(where, ": '__metadata__' cannot be used as a tensor name");
    if (!names.insert(t.name).second) fail(where, ": tensor '", t.name, "' is declared twice");
    std::uint64_t n = 0;
    try {
      n = tensor_nbytes(t);
    } catch (const Error& e) {
      fail(where, ": ", e.what());
    }
    if (data_size_ > kMaxTensorBytes - n) fail(where, ": tensor '", t.name, "': the data section overflows");
    // Appended directly: names are unique (checked above), and ordered_json's operator[] searches
    // the keys linearly, which made headers of 100k-tensor checkpoints quadratic.
    header.get_ref<nlohmann::ordered_json::object_t&>().emplace_back(
        t.name, nlohmann::ordered_json{{"dtype", dtype_name(t.dtype)},
                                       {"shape", t.shape},
                                       {"data_offsets", {data_size_, data_size_ + n}}});
    data_size_ += n;
  }

  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    fail(where, ": cannot encode the header (tensor names and metadata must be UTF-8): ", e.what());
  }
  // Pad with spaces so the data section starts 8-byte aligned, as the reference writer does.
  text.append((kPrefixBytes - text.size() % kPrefixBytes) % kPrefixBytes, ' ');
  if (text.size() > kMaxSafetensorsHeaderBytes) {
    fail(where, ": header of ", text.size(), " bytes exceeds the ", kMaxSafetensorsHeaderBytes, "-byte limit");
  }

  errno = 0;
  out_.open(path_, std::ios::binary | std::ios::out | std::ios::trunc);
  if (!out_) fail(where, ": cannot create: ", errno_text());
  char prefix[kPrefixBytes];
  for (std::size_t i = 0; i < kPrefixBytes; ++i) {
    prefix[i] = static_cast<char>((static_cast<std::uint64_t>(text.size()) >> (8 * i)) & 0xff);
  }
  out_.write(prefix, kPrefixBytes);
  out_.write(text.data(), static_cast<std::streamsize>(text.size()));
  if (!out_) fail(where, ": cannot write the header: ", errno_text());
  header_bytes_ = kPrefixBytes + text.size();
}

void SafetensorsWriter::write(std::span<const std::uint8_t> bytes) {
  if (finished_) fail(path_.string(), ": write after finish()");
  if (bytes.size() > data_size_ - written_) {
    fail(path_.string(), ": writing ", bytes.size(), " bytes at data offset ", written_,
         " overruns the declared data section of ", data_size_, " bytes");
  }
  errno = 0;
  out_.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!out_) fail(path_.string(), ": write failed at data offset ", written_, ": ", errno_text());
  written_ += bytes.size();
}

void SafetensorsWriter::skip(std::uint64_t n) {
  if (finished_) fail(path_.string(), ": skip after finish()");
  if (n > data_size_ - written_) {
    fail(path_.string(), ": skipping ", n, " bytes at data offset ", written_,
         " overruns the declared data section of ", data_size_, " bytes");
  }
  errno = 0;
  // A seek past what was written leaves a hole; finish() extends the file if it ends in one.
  out_.seekp(static_cast<std::streamoff>(n), std::ios::cur);
  if (!out_) fail(path_.string(), ": seek failed at data offset ", written_, ": ", errno_text());
  written_ += n;
}

void SafetensorsWriter::finish() {
  if (finished_) return;
  const std::string where = path_.string();
  if (written_ != data_size_) {
    // Name the first tensor that is not complete.
    std::uint64_t end = 0;
    std::string name;
    for (const auto& t : tensors_) {
      end += tensor_nbytes(t);
      if (end > written_) {
        name = t.name;
        break;
      }
    }
    fail(where, ": finish() with ", data_size_ - written_, " of ", data_size_,
         " data bytes not written; tensor '", name, "' is incomplete");
  }
  const std::uint64_t total = header_bytes_ + data_size_;
  errno = 0;
  out_.close();
  if (!out_) fail(where, ": cannot close: ", errno_text());
  std::error_code ec;
  const std::uint64_t size = std::filesystem::file_size(path_, ec);
  if (ec) fail(where, ": cannot stat: ", ec.message());
  if (size < total) {
    // The data ended in a hole: the seek did not grow the file, so grow it (sparsely) now.
    std::filesystem::resize_file(path_, total, ec);
    if (ec) fail(where, ": cannot extend to ", total, " bytes: ", ec.message());
  }
  finished_ = true;
}

}  // namespace fp4serve
