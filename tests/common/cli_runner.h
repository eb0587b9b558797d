#pragma once
// Runs the fp4serve binary under test through the shell, as a user would, and collects its exit
// code and output. Only the cli tests get FP4SERVE_BINARY (CMake points it at the built binary).
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

#ifndef FP4SERVE_BINARY
#error "cli_runner.h needs FP4SERVE_BINARY (defined for the cli test layer only)"
#endif

namespace fp4serve::testing {

struct CliResult {
  int code = -1;    // exit status; -1 when the binary could not be started or did not exit normally
  std::string out;  // what it printed (see CliStderr)
};

// Whether stderr joins stdout in CliResult::out or is discarded (to compare stdout alone).
enum class CliStderr { kMerge, kDrop };

// `args` go to the shell unquoted, so callers quote anything with spaces themselves.
inline CliResult run_cli(const std::string& args, CliStderr err = CliStderr::kMerge) {
  const std::string cmd =
      std::string(FP4SERVE_BINARY) + " " + args + (err == CliStderr::kMerge ? " 2>&1" : " 2>/dev/null");
  CliResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (pipe == nullptr) return r;
  std::array<char, 4096> buf{};
  std::size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace fp4serve::testing
