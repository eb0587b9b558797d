#include "util/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>

#include "util/error.h"

namespace fp4serve {

namespace {

// Reserves `bytes` of address space aligned to kHugePageBytes (PROT_NONE, nothing backed), so a
// mapping placed there with MAP_FIXED can use 2 MiB pages. Returns nullptr when mmap fails.
void* reserve_huge_aligned(std::size_t bytes) {
  // Over-reserve by one huge page, then give back the unaligned head and the tail.
  const std::size_t span = bytes + kHugePageBytes;
  void* raw = ::mmap(nullptr, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto base = reinterpret_cast<std::uintptr_t>(raw);
  const std::uintptr_t aligned = (base + kHugePageBytes - 1) & ~(std::uintptr_t{kHugePageBytes} - 1);
  if (aligned > base) ::munmap(raw, aligned - base);
  const std::uintptr_t end = aligned + ((bytes + 4095) & ~std::size_t{4095});
  if (base + span > end) ::munmap(reinterpret_cast<void*>(end), base + span - end);
  return reinterpret_cast<void*>(aligned);
}

}  // namespace

void* map_for_huge_pages(std::size_t bytes, int prot, int flags, int fd) {
  void* at = reserve_huge_aligned(bytes);
  if (at == nullptr) return MAP_FAILED;
  void* p = ::mmap(at, bytes, prot, flags | MAP_FIXED, fd, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    ::munmap(at, bytes);
    errno = err;
    return MAP_FAILED;
  }
#ifdef MADV_HUGEPAGE
  ::madvise(p, bytes, MADV_HUGEPAGE);  // refused without THP: pages then stay 4 KiB
#endif
  return p;
}

HugePageBuffer::HugePageBuffer(std::size_t bytes, const char* what) : size_(bytes) {
  if (bytes == 0) return;
  void* p = map_for_huge_pages(bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1);
  if (p == MAP_FAILED) fail(what, ": cannot map ", bytes >> 20, " MiB: ", std::strerror(errno));
  data_ = p;
}

HugePageBuffer::~HugePageBuffer() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

HugePageBuffer::HugePageBuffer(HugePageBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

HugePageBuffer& HugePageBuffer::operator=(HugePageBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

std::uint64_t file_bytes_in_huge_pages(const std::string& dir) {
  // Not smaps_rollup: the kernel may also map other files 2 MiB at a time (khugepaged collapses
  // large executables' text, e.g. an ASan build), and those are not the weights.
  std::error_code ec;
  std::string prefix = std::filesystem::weakly_canonical(dir, ec).string();
  if (ec || prefix.empty()) return 0;
  if (prefix.back() != '/') prefix += '/';
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool in_dir = false;
  std::uint64_t total = 0;
  while (std::getline(f, line)) {
    // A mapping's header is "start-end perms offset dev inode [path]"; its fields follow as
    // "Key: value kB" lines.
    const std::size_t colon = line.find(':');
    const std::size_t space = line.find(' ');
    if (colon == std::string::npos || (space != std::string::npos && space < colon)) {
      const std::size_t slash = line.find('/');
      in_dir = slash != std::string::npos && line.compare(slash, prefix.size(), prefix) == 0;
      continue;
    }
    if (in_dir && line.compare(0, colon + 1, "FilePmdMapped:") == 0)
      total += std::stoull(line.substr(colon + 1)) << 10;
  }
  return total;
}

std::string transparent_huge_pages_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;  // e.g. "always [madvise] never"
  if (!std::getline(f, modes)) return "unavailable";
  const std::size_t open = modes.find('['), close = modes.find(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return "unavailable";
  return modes.substr(open + 1, close - open - 1);
}

bool transparent_huge_pages_available() {
  const std::string mode = transparent_huge_pages_mode();
  return mode != "never" && mode != "unavailable";
}

}  // namespace fp4serve
