#pragma once
// CPU time the hypervisor gave to other guests ("steal", /proc/stat). On a shared VM a run whose
// vCPUs were descheduled a third of the time reads a third slower, and its memory-bandwidth
// probe drops with it: bench reports the stolen share so such a run is not read as the code's.
#include <cstdint>
#include <optional>
#include <string>

namespace fp4serve {

struct CpuTimes {
  std::uint64_t total = 0;  // jiffies of all states, all CPUs (guest time is already in user)
  std::uint64_t steal = 0;
};

// The aggregate "cpu " line of /proc/stat's text; nullopt when it is missing or malformed.
std::optional<CpuTimes> parse_proc_stat(const std::string& text);

// This machine's counters now; nullopt where /proc/stat cannot be read (not Linux).
std::optional<CpuTimes> read_cpu_times();

// Stolen share of the CPU time between two readings, 0..1; 0 when no time passed.
double steal_fraction(const CpuTimes& before, const CpuTimes& after);

// Above 5 % stolen, a run's figures describe the neighbours as much as the code: bench warns.
bool steal_distorts_figures(double fraction);

}  // namespace fp4serve
