#include "util/progress_bar.h"

#include <unistd.h>

#include <cstdio>

namespace fp4serve {

std::string format_bytes(double bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (bytes >= 1024.0 && unit < 4) {
    bytes /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, unit == 0 ? "%.0f %s" : "%.2f %s", bytes, kUnits[unit]);
  return buf;
}

ProgressBar::ProgressBar(std::string label, std::uint64_t total_bytes, bool enabled)
    : label_(std::move(label)),
      total_(total_bytes),
      enabled_(enabled && ::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::advance(std::uint64_t bytes) {
  done_ += bytes;
  draw(false);
}

void ProgressBar::finish() {
  if (finished_) return;
  finished_ = true;
  if (!enabled_) return;
  draw(true);
  std::fputc('\n', stderr);
}

void ProgressBar::draw(bool force) {
  if (!enabled_) return;
  auto now = std::chrono::steady_clock::now();
  if (!force && now - last_draw_ < std::chrono::milliseconds(200)) return;
  last_draw_ = now;
  const double seconds = std::chrono::duration<double>(now - start_).count();
  const double fraction = total_ == 0 ? 1.0 : static_cast<double>(done_) / static_cast<double>(total_);
  const double rate = seconds > 0 ? static_cast<double>(done_) / seconds : 0.0;
  const double eta = rate > 0 ? static_cast<double>(total_ - done_) / rate : 0.0;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(fraction * kWidth);
  std::string bar(static_cast<std::size_t>(filled), '#');
  bar.resize(kWidth, '.');
  std::fprintf(stderr, "\r%s [%s] %3.0f%% %s/%s %s/s ETA %.0fs ", label_.c_str(), bar.c_str(), fraction * 100.0,
               format_bytes(static_cast<double>(done_)).c_str(), format_bytes(static_cast<double>(total_)).c_str(),
               format_bytes(rate).c_str(), eta);
  std::fflush(stderr);
}

}  // namespace fp4serve
