#pragma once
// 2 MiB pages for the big read-only streams: the mapped weights and the bandwidth probe's buffer.
//
// Why: this machine is a VM, so every TLB miss walks two page tables (guest and host). Decode
// streams ~2 GB of expert weights per token; over 4 KiB pages that is half a million misses per
// token. Measured here (docs/perf.md, session 4): one thread reads a cached checkpoint shard at
// 11 GB/s through 4 KiB pages and at 17-18 GB/s through 2 MiB pages; the bandwidth probe reads
// 19 GB/s and 32.6 GB/s. Linux maps a file with 2 MiB pages when the mapping is 2 MiB-aligned,
// it is advised MADV_HUGEPAGE (THP "madvise" mode, Debian's default) and the page cache holds
// the file in 2 MiB folios, which the kernel allocates for such a mapping when it reads the
// file in. Everything here is best effort: where the kernel says no, pages stay 4 KiB and only
// speed changes.
#include <cstddef>
#include <cstdint>
#include <string>

namespace fp4serve {

inline constexpr std::size_t kHugePageBytes = std::size_t{2} << 20;

// mmap(nullptr, bytes, prot, flags, fd, 0) placed at a 2 MiB-aligned address and advised
// MADV_HUGEPAGE (the advice is best effort). Returns MAP_FAILED with errno set when mmap fails.
void* map_for_huge_pages(std::size_t bytes, int prot, int flags, int fd);

// Anonymous memory aligned to and advised for 2 MiB pages; munmap'd on destruction.
class HugePageBuffer {
 public:
  HugePageBuffer() = default;
  // Throws Error naming `what` when the memory cannot be mapped.
  HugePageBuffer(std::size_t bytes, const char* what);
  ~HugePageBuffer();
  HugePageBuffer(HugePageBuffer&& other) noexcept;
  HugePageBuffer& operator=(HugePageBuffer&& other) noexcept;
  HugePageBuffer(const HugePageBuffer&) = delete;
  HugePageBuffer& operator=(const HugePageBuffer&) = delete;

  void* data() const { return data_; }
  std::size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  std::size_t size_ = 0;
};

// Bytes of the files under `dir` (the checkpoint's weights) that this process has mapped 2 MiB
// at a time: the FilePmdMapped of their mappings in /proc/self/smaps; 0 where unreadable.
std::uint64_t file_bytes_in_huge_pages(const std::string& dir);

// The kernel's THP mode, the bracketed word of /sys/kernel/mm/transparent_hugepage/enabled:
// "always", "madvise" or "never"; "unavailable" without THP support. Reported by `doctor`.
std::string transparent_huge_pages_mode();

// False when the mode is "never" or "unavailable": then advice is ignored and everything stays in
// 4 KiB pages.
bool transparent_huge_pages_available();

}  // namespace fp4serve
