// The progress line (common/progress.h): durations and the time left, as a long command prints them.
#include <gtest/gtest.h>

#include "common/progress.h"

TEST(Progress, TimeLeftFromTheRateSoFar) {
  EXPECT_EQ(attnmt::format_duration(42), "42 s");
  EXPECT_EQ(attnmt::format_duration(187), "3:07");
  EXPECT_EQ(attnmt::format_duration(3729), "1:02:09");
  // 37% done in 12 s: 12 / 0.37 - 12 = 20.4 s left.
  EXPECT_EQ(attnmt::progress_text("translating", 370, 1000, 12.0), "translating: 37% (370/1000), 20 s left");
  EXPECT_EQ(attnmt::progress_text("translating", 1000, 1000, 30.0), "translating: 100% (1000/1000)");
  EXPECT_EQ(attnmt::progress_text("translating", 0, 1000, 1.0), "translating: 0% (0/1000)");
}
