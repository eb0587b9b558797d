#pragma once
// Prometheus text exposition (format 0.0.4) of what the server and the scheduler do: requests by
// endpoint and status, tokens, latency histograms, the scheduler's queue and KV cache, the kernel
// backends chosen and the run-time guard's events. Counters and histograms are updated by the
// HTTP handler threads; gauges are read from a SchedulerStats snapshot when /metrics is scraped.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "engine/scheduler.h"
#include "kernels/selection_report.h"
#include "kernels/shapes.h"

namespace fp4serve::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // ascending; +Inf is implicit
  void observe(double value);
  // Appends the _bucket/_sum/_count lines of `name`.
  void render(const std::string& name, std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::uint64_t> counts_;  // per bucket, not cumulative
  std::uint64_t count_ = 0;
  double sum_ = 0.0;
  mutable std::mutex mu_;
};

class Metrics {
 public:
  Metrics();

  void record_request(const std::string& endpoint, int status);
  void record_cancelled();  // the client went away before the end
  void record_tokens(std::int64_t prompt, std::int64_t generated);
  void observe_ttft(double seconds);
  void observe_tpot(double seconds);
  void observe_latency(double seconds);

  // Everything, gauges from `stats` and backend facts from `kernels` (either may be absent while
  // the model loads).
  std::string render(const engine::SchedulerStats* stats, const kernels::SelectionReport* kernels,
                     bool ready) const;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, std::uint64_t> requests_;
  std::uint64_t cancelled_ = 0;
  std::uint64_t prompt_tokens_ = 0;
  std::uint64_t generated_tokens_ = 0;
  Histogram ttft_, tpot_, latency_;
};

// A Prometheus label value with \, " and newlines escaped.
std::string escape_label(const std::string& value);

}  // namespace fp4serve::server
