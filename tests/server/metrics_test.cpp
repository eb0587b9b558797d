#include "server/metrics.h"

#include <gtest/gtest.h>

#include <string>

#include "server/sse.h"

namespace fp4serve::server {
namespace {

bool has_line(const std::string& text, const std::string& line) {
  return text.find("\n" + line + "\n") != std::string::npos || text.rfind(line + "\n", 0) == 0;
}

TEST(Histogram, BucketsAreCumulativeWithSumAndCount) {
  Histogram h({0.1, 1.0});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(0.5);
  h.observe(7.0);
  std::string out;
  h.render("x", out);
  EXPECT_TRUE(has_line(out, "x_bucket{le=\"0.1\"} 1")) << out;
  EXPECT_TRUE(has_line(out, "x_bucket{le=\"1\"} 3")) << out;
  EXPECT_TRUE(has_line(out, "x_bucket{le=\"+Inf\"} 4")) << out;
  EXPECT_TRUE(has_line(out, "x_sum 8.05")) << out;
  EXPECT_TRUE(has_line(out, "x_count 4")) << out;
}

TEST(Metrics, RendersCountersGaugesAndBackends) {
  Metrics m;
  m.record_request("chat", 200);
  m.record_request("chat", 200);
  m.record_request("completions", 400);
  m.record_cancelled();
  m.record_tokens(10, 3);
  m.observe_ttft(0.02);
  engine::SchedulerStats s;
  s.waiting = 2;
  s.running = 5;
  s.kv_blocks_total = 100;
  s.kv_blocks_used = 25;
  s.nan_guard_events = 1;
  kernels::SelectionReport report;
  report.semantics = "W4A16";
  kernels::FamilyReport fam;
  fam.family = kernels::OpFamily::Moe;
  fam.requested = "auto";
  fam.chosen = "avx2";
  report.families.push_back(fam);
  report.counters.fallbacks = 2;
  const std::string out = m.render(&s, &report, true);
  EXPECT_TRUE(has_line(out, "fp4serve_ready 1")) << out;
  EXPECT_TRUE(has_line(out, "fp4serve_requests_total{endpoint=\"chat\",status=\"200\"} 2")) << out;
  EXPECT_TRUE(has_line(out, "fp4serve_requests_total{endpoint=\"completions\",status=\"400\"} 1")) << out;
  EXPECT_TRUE(has_line(out, "fp4serve_requests_cancelled_total 1")) << out;
  EXPECT_TRUE(has_line(out, "fp4serve_prompt_tokens_total 10")) << out;
  EXPECT_TRUE(has_line(out, "fp4serve_generation_tokens_total 3")) << out;
  EXPECT_TRUE(has_line(out, "fp4serve_time_to_first_token_seconds_count 1")) << out;
  EXPECT_TRUE(has_line(out, "fp4serve_requests_waiting 2")) << out;
  EXPECT_TRUE(has_line(out, "fp4serve_requests_running 5")) << out;
  EXPECT_TRUE(has_line(out, "fp4serve_kv_cache_usage_ratio 0.25")) << out;
  EXPECT_TRUE(has_line(out, "fp4serve_nan_guard_events_total 1")) << out;
  EXPECT_TRUE(has_line(out, "fp4serve_kernel_fallbacks_total 2")) << out;
  EXPECT_TRUE(has_line(
      out, "fp4serve_kernel_backend_info{family=\"moe\",requested=\"auto\",chosen=\"avx2\",semantics=\"W4A16\"} 1"))
      << out;
  EXPECT_NE(out.find("# TYPE fp4serve_time_per_output_token_seconds histogram"), std::string::npos);
}

TEST(Metrics, WhileLoadingOnlyServerMetricsAppear) {
  Metrics m;
  const std::string out = m.render(nullptr, nullptr, false);
  EXPECT_TRUE(has_line(out, "fp4serve_ready 0"));
  EXPECT_EQ(out.find("fp4serve_requests_running"), std::string::npos);
}

TEST(Metrics, LabelsAreEscaped) { EXPECT_EQ(escape_label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd"); }

TEST(Sse, EventsAndInvalidUtf8) {
  EXPECT_EQ(sse_event({{"a", 1}}), "data: {\"a\":1}\n\n");
  EXPECT_EQ(sse_done(), "data: [DONE]\n\n");
  EXPECT_EQ(sse_comment("x\ny"), ": x y\n\n");
  // Half of a UTF-8 character (one token of a split emoji) must not throw.
  const std::string half = "\xF0\x9F";
  EXPECT_EQ(to_json_text(nlohmann::ordered_json(half)), "\"\xEF\xBF\xBD\"");
}

}  // namespace
}  // namespace fp4serve::server
