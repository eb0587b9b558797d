#pragma once
// Read-only memory map of a whole file. Mapping costs nothing until pages are touched, which is
// what lets `inspect` answer in milliseconds on a 17 GB checkpoint. Files of 2 MiB or more are
// mapped so the kernel can use 2 MiB pages for them (util/huge_pages.h).
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <span>

namespace fp4serve {

class MappedFile {
 public:
  MappedFile() = default;
  // Throws Error naming the path when the file cannot be opened or mapped.
  explicit MappedFile(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  std::span<const std::uint8_t> bytes() const { return {data_, size_}; }
  std::size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void release();
  std::filesystem::path path_;
  const std::uint8_t* data_ = nullptr;
  std::size_t size_ = 0;
};

}  // namespace fp4serve
