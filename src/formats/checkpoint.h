#pragma once
// A checkpoint directory: config.json, optional hf_quant_config.json, and weights in one
// `model.safetensors`, or several shards named by `model.safetensors.index.json`.
// Tensor names are unique across the whole checkpoint.
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "formats/safetensors.h"

namespace fp4serve {

struct TensorRef {
  const TensorInfo* info = nullptr;
  const SafetensorsFile* file = nullptr;
  std::span<const std::uint8_t> bytes() const { return file->data(*info); }
};

class Checkpoint {
 public:
  // Opens the safetensors weights in `dir` (headers only; data is mapped lazily).
  static Checkpoint open(const std::filesystem::path& dir);

  const std::filesystem::path& dir() const { return dir_; }
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  // nullptr when absent.
  const TensorRef* find(std::string_view name) const;
  // Throws Error naming the tensor and the checkpoint when absent.
  const TensorRef& at(std::string_view name) const;
  // Every tensor, in name order.
  const std::map<std::string, TensorRef, std::less<>>& tensors() const { return tensors_; }
  std::uint64_t total_bytes() const;
  // Oddities that do not stop loading, e.g. a shard tensor the index does not list (such tensors
  // are still loaded, as Transformers and vLLM load them). Each line names the file and tensor.
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  void add_file(const std::filesystem::path& path);
  void add_opened(std::vector<SafetensorsFile> files);
  void open_sharded(const std::filesystem::path& index_path);

  std::filesystem::path dir_;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorRef, std::less<>> tensors_;
  std::vector<std::string> warnings_;
};

}  // namespace fp4serve
