#pragma once
// A one-line progress bar on stderr for long jobs (writing a 17 GB checkpoint). Draws only when
// stderr is a terminal, so logs and tests stay clean.
#include <chrono>
#include <cstdint>
#include <string>

namespace fp4serve {

class ProgressBar {
 public:
  ProgressBar(std::string label, std::uint64_t total_bytes, bool enabled = true);
  ~ProgressBar();
  void advance(std::uint64_t bytes);
  void finish();

 private:
  void draw(bool force);
  std::string label_;
  std::uint64_t total_;
  std::uint64_t done_ = 0;
  bool enabled_;
  bool finished_ = false;
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point last_draw_;
};

// "1.50 GiB"
std::string format_bytes(double bytes);

}  // namespace fp4serve
