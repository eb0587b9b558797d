#include "server/metrics.h"

#include <cmath>
#include <sstream>

namespace fp4serve::server {

namespace {

std::string number(double v) {
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  if (std::isnan(v)) return "NaN";
  std::ostringstream os;
  os.precision(10);
  os << v;
  return os.str();
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string& out, const std::string& name, double value, const std::string& labels = "") {
  out += name + (labels.empty() ? "" : "{" + labels + "}") + " " + number(value) + "\n";
}

// Counters and gauges without labels: the header and the one sample.
template <typename T>
void counter(std::string& out, const char* name, const char* help, T value) {
  header(out, name, "counter", help);
  sample(out, name, static_cast<double>(value));
}

template <typename T>
void gauge(std::string& out, const char* name, const char* help, T value) {
  header(out, name, "gauge", help);
  sample(out, name, static_cast<double>(value));
}

void histogram(std::string& out, const char* name, const char* help, const Histogram& h) {
  header(out, name, "histogram", help);
  h.render(name, out);
}

}  // namespace

std::string escape_label(const std::string& value) {
  std::string out;
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out.push_back(c);
  }
  return out;
}

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  std::lock_guard lock(mu_);
  std::size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  ++count_;
  sum_ += value;
}

void Histogram::render(const std::string& name, std::string& out) const {
  std::lock_guard lock(mu_);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const double le = i < bounds_.size() ? bounds_[i] : INFINITY;
    sample(out, name + "_bucket", static_cast<double>(cumulative), "le=\"" + number(le) + "\"");
  }
  sample(out, name + "_sum", sum_);
  sample(out, name + "_count", static_cast<double>(count_));
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      tpot_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      latency_({0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}) {}

void Metrics::record_request(const std::string& endpoint, int status) {
  std::lock_guard lock(mu_);
  ++requests_[{endpoint, status}];
}

void Metrics::record_cancelled() {
  std::lock_guard lock(mu_);
  ++cancelled_;
}

void Metrics::record_tokens(std::int64_t prompt, std::int64_t generated) {
  std::lock_guard lock(mu_);
  prompt_tokens_ += static_cast<std::uint64_t>(prompt);
  generated_tokens_ += static_cast<std::uint64_t>(generated);
}

void Metrics::observe_ttft(double seconds) { ttft_.observe(seconds); }
void Metrics::observe_tpot(double seconds) { tpot_.observe(seconds); }
void Metrics::observe_latency(double seconds) { latency_.observe(seconds); }

std::string Metrics::render(const engine::SchedulerStats* stats, const kernels::SelectionReport* kernels,
                            bool ready) const {
  std::string out;
  gauge(out, "fp4serve_ready", "1 once the model is loaded and requests are served", ready ? 1 : 0);
  {
    std::lock_guard lock(mu_);
    header(out, "fp4serve_requests_total", "counter", "HTTP requests answered, by endpoint and status code");
    for (const auto& [key, n] : requests_) {
      sample(out, "fp4serve_requests_total", static_cast<double>(n),
             "endpoint=\"" + escape_label(key.first) + "\",status=\"" + std::to_string(key.second) + "\"");
    }
    counter(out, "fp4serve_requests_cancelled_total", "Requests whose client disconnected before the end",
            cancelled_);
    counter(out, "fp4serve_prompt_tokens_total", "Prompt tokens of finished requests", prompt_tokens_);
    counter(out, "fp4serve_generation_tokens_total", "Tokens generated for finished requests", generated_tokens_);
  }
  histogram(out, "fp4serve_time_to_first_token_seconds", "From request arrival to its first token", ttft_);
  histogram(out, "fp4serve_time_per_output_token_seconds", "Mean time between tokens of one request", tpot_);
  histogram(out, "fp4serve_request_latency_seconds", "From request arrival to its last token", latency_);

  if (stats) {
    gauge(out, "fp4serve_requests_waiting", "Requests queued for admission", stats->waiting);
    gauge(out, "fp4serve_requests_running", "Sequences being prefilled or decoded", stats->running);
    gauge(out, "fp4serve_kv_cache_blocks_total", "KV cache blocks in the memory budget", stats->kv_blocks_total);
    gauge(out, "fp4serve_kv_cache_blocks_used", "KV cache blocks held by sequences", stats->kv_blocks_used);
    gauge(out, "fp4serve_kv_cache_usage_ratio", "Used fraction of the KV cache (0..1)",
          stats->kv_blocks_total > 0
              ? static_cast<double>(stats->kv_blocks_used) / static_cast<double>(stats->kv_blocks_total)
              : 0.0);
    counter(out, "fp4serve_scheduler_steps_total", "Batched forward steps run", stats->steps);
    counter(out, "fp4serve_preemptions_total", "Sequences preempted for lack of KV blocks", stats->preemptions);
    counter(out, "fp4serve_nan_guard_events_total", "Steps whose logits were not finite", stats->nan_guard_events);
    counter(out, "fp4serve_scheduler_prompt_tokens_total", "Prompt tokens prefilled (all requests)",
            stats->prompt_tokens);
    counter(out, "fp4serve_scheduler_generated_tokens_total", "Tokens sampled (all requests)",
            stats->generated_tokens);
  }
  if (kernels) {
    header(out, "fp4serve_kernel_backend_info", "gauge",
           "The backend chosen per op family (value 1), with the one requested");
    for (const kernels::FamilyReport& f : kernels->families) {
      if (f.chosen.empty()) continue;
      sample(out, "fp4serve_kernel_backend_info", 1,
             "family=\"" + escape_label(std::string(kernels::family_name(f.family))) + "\",requested=\"" +
                 escape_label(f.requested) + "\",chosen=\"" + escape_label(f.chosen) + "\",semantics=\"" +
                 escape_label(kernels->semantics) + "\"");
    }
    const kernels::GuardCounters& c = kernels->counters;
    counter(out, "fp4serve_kernel_guard_events_total", "Non-finite outputs reported to the kernel guard",
            c.non_finite_events);
    counter(out, "fp4serve_kernel_revalidations_total", "Backend re-validations run by the guard", c.revalidations);
    counter(out, "fp4serve_kernel_revalidation_failures_total", "Re-validations that failed",
            c.revalidation_failures);
    counter(out, "fp4serve_kernel_fallbacks_total", "Op families switched to another backend at run time", c.fallbacks);
  }
  return out;
}

}  // namespace fp4serve::server
