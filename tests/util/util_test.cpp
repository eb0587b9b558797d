#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "util/error.h"
#include "util/mapped_file.h"
#include "util/progress_bar.h"

namespace fp4serve {
namespace {

namespace fs = std::filesystem;

TEST(MappedFile, MapsBytesAndNamesThePathOnError) {
  const fs::path p = fs::temp_directory_path() / "fp4serve_mapped_file_test.bin";
  {
    std::ofstream out(p, std::ios::binary);
    out << "hello";
  }
  MappedFile f(p);
  ASSERT_EQ(f.size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(f.bytes().data()), 5), "hello");
  MappedFile moved = std::move(f);
  EXPECT_EQ(moved.size(), 5u);
  EXPECT_EQ(f.size(), 0u);
  fs::remove(p);
  try {
    MappedFile missing(p);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(p.string()), std::string::npos);
  }
  EXPECT_THROW(MappedFile(fs::temp_directory_path()), Error);  // a directory
}

TEST(MappedFile, EmptyFileHasNoBytes) {
  const fs::path p = fs::temp_directory_path() / "fp4serve_mapped_empty.bin";
  { std::ofstream out(p); }
  MappedFile f(p);
  EXPECT_EQ(f.size(), 0u);
  EXPECT_TRUE(f.bytes().empty());
  fs::remove(p);
}

TEST(FormatBytes, PicksBinaryUnits) {
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(1536), "1.50 KiB");
  EXPECT_EQ(format_bytes(3.0 * 1024 * 1024 * 1024), "3.00 GiB");
}

TEST(Fail, JoinsItsParts) {
  try {
    fail("tensor '", "w", "' has ", 3, " dims");
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "tensor 'w' has 3 dims");
  }
}

}  // namespace
}  // namespace fp4serve
