#include "util/cpu_steal.h"

#include <gtest/gtest.h>

namespace fp4serve {
namespace {

TEST(CpuSteal, ReadsTheAggregateLineOfProcStat) {
  const std::string text =
      "cpu  100 5 20 800 10 1 2 62 30 0\n"
      "cpu0 50 2 10 400 5 0 1 31 15 0\n"
      "intr 12345\n";
  const auto t = parse_proc_stat(text);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->steal, 62u);
  EXPECT_EQ(t->total, 100u + 5 + 20 + 800 + 10 + 1 + 2 + 62);  // guest time is inside user
}

TEST(CpuSteal, MissingOrShortLinesAreNotGuessed) {
  EXPECT_FALSE(parse_proc_stat("").has_value());
  EXPECT_FALSE(parse_proc_stat("cpu0 1 2 3 4 5 6 7 8\n").has_value());  // only a per-CPU line
  EXPECT_FALSE(parse_proc_stat("cpu  1 2 3 4 5 6 7\n").has_value());    // no steal field
  EXPECT_FALSE(parse_proc_stat("cpu  1 2 x 4 5 6 7 8\n").has_value());
}

TEST(CpuSteal, FractionIsTheStolenShareOfTheElapsedTime) {
  const CpuTimes before{1000, 100}, after{1400, 200};
  EXPECT_DOUBLE_EQ(steal_fraction(before, after), 0.25);
  EXPECT_DOUBLE_EQ(steal_fraction(before, before), 0.0);  // no time passed
  EXPECT_DOUBLE_EQ(steal_fraction(after, before), 0.0);   // counters went backwards
}

TEST(CpuSteal, OnlyMoreThanFivePercentIsWarnedAbout) {
  EXPECT_FALSE(steal_distorts_figures(0.0));
  EXPECT_FALSE(steal_distorts_figures(0.05));
  EXPECT_TRUE(steal_distorts_figures(0.051));
  EXPECT_TRUE(steal_distorts_figures(0.33));  // session 18's shared VM
}

TEST(CpuSteal, ThisMachineCanBeRead) {
  const auto a = read_cpu_times();
  ASSERT_TRUE(a.has_value()) << "/proc/stat has no aggregate cpu line with a steal field";
  EXPECT_GT(a->total, 0u);
  EXPECT_LE(a->steal, a->total);
}

}  // namespace
}  // namespace fp4serve
