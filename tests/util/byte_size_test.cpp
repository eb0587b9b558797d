#include "util/byte_size.h"

#include <gtest/gtest.h>

#include "common/expect_error.h"

namespace fp4serve {
namespace {

TEST(ByteSize, SuffixesAndPlainNumbers) {
  EXPECT_EQ(parse_byte_size("1048576", "--x"), 1048576u);
  EXPECT_EQ(parse_byte_size("4GiB", "--x"), 4ull << 30);
  EXPECT_EQ(parse_byte_size("4G", "--x"), 4ull << 30);
  EXPECT_EQ(parse_byte_size("512MB", "--x"), 512000000u);
  EXPECT_EQ(parse_byte_size("512mib", "--x"), 512ull << 20);
  EXPECT_EQ(parse_byte_size("1.5 GiB", "--x"), 3ull << 29);
  EXPECT_EQ(parse_byte_size("64KB", "--x"), 64000u);
}

TEST(ByteSize, GarbageNamesTheFlag) {
  for (const char* bad : {"", "GiB", "4XB", "-1G", "1..2G", "1e99T"}) {
    fp4serve::testing::expect_error([&] { parse_byte_size(bad, "--kv-cache-memory"); }, {"--kv-cache-memory"});
  }
}

}  // namespace
}  // namespace fp4serve
