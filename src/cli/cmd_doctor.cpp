// `fp4serve doctor [-m MODEL_DIR] [--json]`: what this build and machine can run, and proof:
// every compiled backend validated against the reference, on built-in shapes or a model's.
#include <CLI/CLI.hpp>

#include <iostream>
#include <memory>

#include "cli/app.h"
#include "kernels/cli_options.h"
#include "kernels/doctor_report.h"
#include "util/error.h"

namespace fp4serve::cli {

void register_doctor(CLI::App& app) {
  auto* cmd = app.add_subcommand("doctor", "Report build, CPU features and every kernel backend's validation verdict");
  struct Args {
    std::string model_dir;
    bool json = false;
    std::uint64_t seed = 0;
    kernels::BackendOptions backends;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("-m,--model", args->model_dir, "Validate on this checkpoint's shapes (config.json + safetensors headers)");
  cmd->add_flag("--json", args->json, "Print one JSON object (schema fp4serve.doctor/1, docs/kernels.md)");
  cmd->add_option("--seed", args->seed, "Seed of the validation inputs (0: a fresh one, reported)");
  kernels::add_backend_options(*cmd, args->backends);
  cmd->callback([args] {
    kernels::DoctorOptions o;
    if (!args->model_dir.empty()) o.model_dir = args->model_dir;
    o.backends = args->backends;
    o.backends.seed = args->seed;
    const nlohmann::json report = kernels::doctor_report(o);
    if (args->json) std::cout << report.dump(2) << "\n";
    else std::cout << kernels::doctor_text(report);
    std::cout.flush();
    if (!report["ok"].get<bool>()) fail("kernel validation failed: ", report["error"].get<std::string>());
  });
}

}  // namespace fp4serve::cli
