#pragma once
// The stopping rule of a bandwidth probe, checked from the passes it reports: at least min_passes
// timed passes, and more only while their time stayed under min_seconds (or the cap is reached).
// Checking the rule, not a pass count, keeps the tests true on a machine of any speed: on a loaded
// CI runner three passes over 16 MiB have taken longer than 0.02 s.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace fp4serve::testing {

inline void expect_bandwidth_stopping_rule(const std::vector<double>& pass_gb_per_s, std::uint64_t bytes,
                                           std::size_t min_passes, double min_seconds, std::size_t cap) {
  ASSERT_GE(pass_gb_per_s.size(), min_passes);
  ASSERT_LE(pass_gb_per_s.size(), cap);
  const auto pass_seconds = [&](std::size_t i) { return static_cast<double>(bytes) / (pass_gb_per_s[i] * 1e9); };
  double before_last = 0.0;
  for (std::size_t i = 0; i + 1 < pass_gb_per_s.size(); ++i) before_last += pass_seconds(i);
  const double total = before_last + pass_seconds(pass_gb_per_s.size() - 1);
  const double slack = 1e-6 * min_seconds + 1e-9 * static_cast<double>(pass_gb_per_s.size());
  // A pass beyond min_passes was run only because the time so far was short of min_seconds...
  if (pass_gb_per_s.size() > min_passes) {
    EXPECT_LT(before_last, min_seconds + slack);
  }
  // ...and the probe stopped only once it had min_seconds, or at the cap.
  if (pass_gb_per_s.size() < cap) {
    EXPECT_GE(total, min_seconds - slack);
  }
}

}  // namespace fp4serve::testing
