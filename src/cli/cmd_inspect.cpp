// `fp4serve inspect MODEL_DIR [--json]`: what a checkpoint is, from headers and configs only.
#include <CLI/CLI.hpp>

#include <iostream>

#include "cli/app.h"
#include "model/checkpoint_summary.h"

namespace fp4serve::cli {

void register_inspect(CLI::App& app) {
  auto* cmd = app.add_subcommand("inspect", "Describe a checkpoint: shape, parameters, quantization, memory, bytes per token");
  struct Args {
    std::string model_dir;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  cmd->add_option("model_dir", args->model_dir, "Checkpoint directory (config.json + safetensors)")->required();
  cmd->add_flag("--json", args->json, "Print one JSON object instead of text");
  cmd->callback([args] {
    const CheckpointSummary summary = summarize_checkpoint(args->model_dir);
    if (args->json) std::cout << summary_to_json(summary).dump(2) << "\n";
    else std::cout << summary_to_text(summary);
  });
}

}  // namespace fp4serve::cli
