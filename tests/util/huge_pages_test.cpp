#include "util/huge_pages.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

#include "common/temp_dir.h"
#include "util/mapped_file.h"

namespace fp4serve {
namespace {

// True when the VMA containing `p` carries the MADV_HUGEPAGE flag ("hg" in /proc/self/smaps).
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


bool huge_aligned(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % kHugePageBytes == 0; }

void write_file(const std::filesystem::path& path, std::size_t bytes) {
  std::ofstream f(path, std::ios::binary);
  const std::string chunk(4096, 'w');
  for (std::size_t done = 0; done < bytes; done += chunk.size()) f.write(chunk.data(), static_cast<std::streamsize>(std::min(chunk.size(), bytes - done)));
}

TEST(HugePages, LargeFilesAreMappedAlignedAndAdvisedFor2MiBPages) {
  if (!transparent_huge_pages_available()) GTEST_SKIP() << "transparent huge pages are off on this kernel";
  testing::TempDir dir;
  const auto path = dir.path() / "weights.bin";
  write_file(path, 5 * kHugePageBytes / 2);  // 5 MiB: not a multiple of the page either
  const MappedFile f(path);
  ASSERT_EQ(f.size(), 5 * kHugePageBytes / 2);
  EXPECT_TRUE(huge_aligned(f.bytes().data()));
  EXPECT_TRUE(huge_page_advised(f.bytes().data()));
  EXPECT_TRUE(huge_page_advised(f.bytes().data() + f.size() - 1));
  EXPECT_EQ(f.bytes()[f.size() - 1], 'w');  // the tail past the last 2 MiB boundary is the file's
}

TEST(HugePages, HugeMappedBytesCountOnlyTheGivenDirectory) {
  // Only the files under the directory count, never other files the process maps (the
  // executable's text may be collapsed into 2 MiB pages too).
  testing::TempDir dir, other;
  const auto path = dir.path() / "weights.bin";
  write_file(path, 3 * kHugePageBytes);
  const MappedFile f(path);
  volatile char sink = 0;
  for (std::size_t i = 0; i < f.size(); i += 4096) sink = static_cast<char>(sink + f.bytes()[i]);
  EXPECT_LE(file_bytes_in_huge_pages(dir.path().string()), f.size());
  EXPECT_EQ(file_bytes_in_huge_pages(other.path().string()), 0u);
  EXPECT_EQ(file_bytes_in_huge_pages((dir.path() / "no-such-dir").string()), 0u);
}

TEST(HugePages, SmallFilesAreMappedPlainly) {
  testing::TempDir dir;
  const auto path = dir.path() / "config.json";
  write_file(path, 100);
  const MappedFile f(path);
  ASSERT_EQ(f.size(), 100u);
  EXPECT_FALSE(huge_page_advised(f.bytes().data()));
  EXPECT_EQ(f.bytes()[99], 'w');
}

TEST(HugePages, BufferIsAlignedAdvisedAndWritable) {
  if (!transparent_huge_pages_available()) GTEST_SKIP() << "transparent huge pages are off on this kernel";
  HugePageBuffer b(3 * kHugePageBytes, "test buffer");
  ASSERT_NE(b.data(), nullptr);
  EXPECT_TRUE(huge_aligned(b.data()));
  EXPECT_TRUE(huge_page_advised(b.data()));
  std::memset(b.data(), 7, b.size());
  EXPECT_EQ(static_cast<const unsigned char*>(b.data())[b.size() - 1], 7);
  HugePageBuffer moved = std::move(b);
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(moved.size(), 3 * kHugePageBytes);
}

TEST(HugePages, PlainMemoryIsNotReportedAdvised) {
  const std::string s(1 << 20, 'x');  // heap memory nobody advised
  EXPECT_FALSE(huge_page_advised(s.data()));
}

}  // namespace
}  // namespace fp4serve
