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
  header(out, "fp4serve_ready", "gauge", "1 once the model is loaded and requests are served");
  sample(out, "fp4serve_ready", ready ? 1 : 0);
  {
    std::lock_guard lock(mu_);
    header(out, "fp4serve_requests_total", "counter", "HTTP requests answered, by endpoint and status code");
    for (const auto& [key, n] : requests_) {
      sample(out, "fp4serve_requests_total", static_cast<double>(n),
             "endpoint=\"" + escape_label(key.first) + "\",status=\"" + std::to_string(key.second) + "\"");
    }
    header(out, "fp4serve_requests_cancelled_total", "counter", "Requests whose client disconnected before the end");
    sample(out, "fp4serve_requests_cancelled_total", static_cast<double>(cancelled_));
    header(out, "fp4serve_prompt_tokens_total", "counter", "Prompt tokens of finished requests");
    sample(out, "fp4serve_prompt_tokens_total", static_cast<double>(prompt_tokens_));
    header(out, "fp4serve_generation_tokens_total", "counter", "Tokens generated for finished requests");
    sample(out, "fp4serve_generation_tokens_total", static_cast<double>(generated_tokens_));
  }
  header(out, "fp4serve_time_to_first_token_seconds", "histogram", "From request arrival to its first token");
  ttft_.render("fp4serve_time_to_first_token_seconds", out);
  header(out, "fp4serve_time_per_output_token_seconds", "histogram", "Mean time between tokens of one request");
  tpot_.render("fp4serve_time_per_output_token_seconds", out);
  header(out, "fp4serve_request_latency_seconds", "histogram", "From request arrival to its last token");
  latency_.render("fp4serve_request_latency_seconds", out);

  if (stats) {
    header(out, "fp4serve_requests_waiting", "gauge", "Requests queued for admission");
    sample(out, "fp4serve_requests_waiting", static_cast<double>(stats->waiting));
    header(out, "fp4serve_requests_running", "gauge", "Sequences being prefilled or decoded");
    sample(out, "fp4serve_requests_running", static_cast<double>(stats->running));
    header(out, "fp4serve_kv_cache_blocks_total", "gauge", "KV cache blocks in the memory budget");
    sample(out, "fp4serve_kv_cache_blocks_total", static_cast<double>(stats->kv_blocks_total));
    header(out, "fp4serve_kv_cache_blocks_used", "gauge", "KV cache blocks held by sequences");
    sample(out, "fp4serve_kv_cache_blocks_used", static_cast<double>(stats->kv_blocks_used));
    header(out, "fp4serve_kv_cache_usage_ratio", "gauge", "Used fraction of the KV cache (0..1)");
    sample(out, "fp4serve_kv_cache_usage_ratio",
           stats->kv_blocks_total > 0
               ? static_cast<double>(stats->kv_blocks_used) / static_cast<double>(stats->kv_blocks_total)
               : 0.0);
    header(out, "fp4serve_scheduler_steps_total", "counter", "Batched forward steps run");
    sample(out, "fp4serve_scheduler_steps_total", static_cast<double>(stats->steps));
    header(out, "fp4serve_preemptions_total", "counter", "Sequences preempted for lack of KV blocks");
    sample(out, "fp4serve_preemptions_total", static_cast<double>(stats->preemptions));
    header(out, "fp4serve_nan_guard_events_total", "counter", "Steps whose logits were not finite");
    sample(out, "fp4serve_nan_guard_events_total", static_cast<double>(stats->nan_guard_events));
    header(out, "fp4serve_scheduler_prompt_tokens_total", "counter", "Prompt tokens prefilled (all requests)");
    sample(out, "fp4serve_scheduler_prompt_tokens_total", static_cast<double>(stats->prompt_tokens));
    header(out, "fp4serve_scheduler_generated_tokens_total", "counter", "Tokens sampled (all requests)");
    sample(out, "fp4serve_scheduler_generated_tokens_total", static_cast<double>(stats->generated_tokens));
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
    header(out, "fp4serve_kernel_guard_events_total", "counter", "Non-finite outputs reported to the kernel guard");
    sample(out, "fp4serve_kernel_guard_events_total", static_cast<double>(c.non_finite_events));
    header(out, "fp4serve_kernel_revalidations_total", "counter", "Backend re-validations run by the guard");
    sample(out, "fp4serve_kernel_revalidations_total", static_cast<double>(c.revalidations));
    header(out, "fp4serve_kernel_revalidation_failures_total", "counter", "Re-validations that failed");
    sample(out, "fp4serve_kernel_revalidation_failures_total", static_cast<double>(c.revalidation_failures));
    header(out, "fp4serve_kernel_fallbacks_total", "counter", "Op families switched to another backend at run time");
    sample(out, "fp4serve_kernel_fallbacks_total", static_cast<double>(c.fallbacks));
  }
  return out;
}

}  // namespace fp4serve::server
