#include "util/median.h"

#include <gtest/gtest.h>

namespace fp4serve {
namespace {

TEST(Median, OddCountIsTheMiddleValueWhateverTheOrder) {
  EXPECT_DOUBLE_EQ(median_of({5.0, 1.0, 3.0}), 3.0);
  EXPECT_DOUBLE_EQ(median_of({2.0, 9.0, 4.0, 7.0, 1.0}), 4.0);
  EXPECT_DOUBLE_EQ(median_of({42.0}), 42.0);
}

TEST(Median, EvenCountIsTheMeanOfTheTwoMiddleValues) {
  EXPECT_DOUBLE_EQ(median_of({4.0, 1.0}), 2.5);
  EXPECT_DOUBLE_EQ(median_of({10.0, 1.0, 7.0, 3.0}), 5.0);  // middle values 3 and 7
  EXPECT_DOUBLE_EQ(median_of({2.0, 2.0, 8.0, 8.0}), 5.0);
}

TEST(Median, EmptySampleIsZero) { EXPECT_DOUBLE_EQ(median_of({}), 0.0); }

}  // namespace
}  // namespace fp4serve
