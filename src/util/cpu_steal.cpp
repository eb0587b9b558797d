#include "util/cpu_steal.h"

#include <fstream>
#include <sstream>

namespace fp4serve {

std::optional<CpuTimes> parse_proc_stat(const std::string& text) {
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("cpu ", 0) != 0) continue;
    std::istringstream fields(line.substr(4));
    // user nice system idle iowait irq softirq steal [guest guest_nice]: guest and guest_nice
    // are already counted in user and nice, so they are not added again.
    std::uint64_t v[8];
    for (std::uint64_t& f : v)
      if (!(fields >> f)) return std::nullopt;  // kernels before 2.6.11 have no steal field
    CpuTimes t;
    for (std::uint64_t f : v) t.total += f;
    t.steal = v[7];
    return t;
  }
  return std::nullopt;
}

std::optional<CpuTimes> read_cpu_times() {
  std::ifstream f("/proc/stat");
  if (!f) return std::nullopt;
  std::ostringstream text;
  text << f.rdbuf();
  return parse_proc_stat(text.str());
}

double steal_fraction(const CpuTimes& before, const CpuTimes& after) {
  if (after.total <= before.total || after.steal < before.steal) return 0.0;
  const double stolen = static_cast<double>(after.steal - before.steal);
  return stolen / static_cast<double>(after.total - before.total);
}

bool steal_distorts_figures(double fraction) { return fraction > 0.05; }

}  // namespace fp4serve
