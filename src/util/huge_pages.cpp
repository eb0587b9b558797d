#include "util/huge_pages.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <utility>

#include "util/error.h"

namespace fp4serve {

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

bool advise_huge_pages(void* p, std::size_t bytes) {
#ifdef MADV_HUGEPAGE
  return ::madvise(p, bytes, MADV_HUGEPAGE) == 0;
#else
  (void)p;
  (void)bytes;
  return false;
#endif
}

HugePageBuffer::HugePageBuffer(std::size_t bytes, const char* what) : size_(bytes) {
  if (bytes == 0) return;
  void* at = reserve_huge_aligned(bytes);
  void* p = at == nullptr ? MAP_FAILED
                          : ::mmap(at, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
  if (p == MAP_FAILED) {
    const int err = errno;
    if (at != nullptr) ::munmap(at, bytes);
    fail(what, ": cannot map ", bytes >> 20, " MiB: ", std::strerror(err));
  }
  advise_huge_pages(p, bytes);
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

PageMappingStats page_mapping_stats() {
  PageMappingStats s;
  std::ifstream f("/proc/self/smaps_rollup");
  std::string key;
  std::uint64_t kib = 0;
  while (f >> key) {
    if (key == "FilePmdMapped:" && f >> kib) s.file_pmd_bytes = kib << 10;
    else if (key == "AnonHugePages:" && f >> kib) s.anon_huge_bytes = kib << 10;
    f.ignore(1 << 12, '\n');
  }
  return s;
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

bool huge_page_advised(const void* p) {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream f("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(f, line)) {
    // A VMA header: "7f..-7f.. r--p offset dev inode path".
    const std::size_t dash = line.find('-');
    if (dash != std::string::npos && dash > 0 && line.find(':') > dash &&
        line.find_first_not_of("0123456789abcdef") == dash) {
      const std::uintptr_t b = std::stoull(line.substr(0, dash), nullptr, 16);
      const std::uintptr_t e = std::stoull(line.substr(dash + 1, line.find(' ') - dash - 1), nullptr, 16);
      inside = addr >= b && addr < e;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) {
      std::istringstream flags(line.substr(8));
      std::string flag;
      while (flags >> flag)
        if (flag == "hg") return true;
      return false;
    }
  }
  return false;
}

}  // namespace fp4serve
