#pragma once
// Streams a safetensors file to disk: the header is written first from declared tensors, then each
// tensor's bytes in declaration order, so a multi-gigabyte shard never has to sit in memory.
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "formats/dtype.h"

namespace fp4serve {

struct TensorDecl {
  std::string name;
  DType dtype = DType::F32;
  std::vector<std::int64_t> shape;
};

class SafetensorsWriter {
 public:
  // Writes the header immediately. Tensors must then be written in the order declared.
  SafetensorsWriter(const std::filesystem::path& path, std::vector<TensorDecl> tensors,
                    const std::map<std::string, std::string>& metadata = {});
  // Appends the bytes of the next declared tensor (may be called several times per tensor).
  void write(std::span<const std::uint8_t> bytes);
  // Skips the next `n` bytes, leaving a hole (a sparse file) that reads back as zeros.
  void skip(std::uint64_t n);
  // Checks every declared byte was written and closes the file.
  void finish();
  const std::vector<TensorDecl>& tensors() const { return tensors_; }

 private:
  std::filesystem::path path_;
  std::vector<TensorDecl> tensors_;
  std::ofstream out_;
  std::uint64_t header_bytes_ = 0;  // length prefix + padded JSON
  std::uint64_t data_size_ = 0;
  std::uint64_t written_ = 0;
  bool finished_ = false;
};

std::uint64_t tensor_nbytes(const TensorDecl& tensor);

}  // namespace fp4serve
