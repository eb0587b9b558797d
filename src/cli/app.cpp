#include "cli/app.h"

#include <CLI/CLI.hpp>

#include <iostream>

#include "build_info.h"
#include "util/error.h"

namespace fp4serve::cli {

int run_app(int argc, char** argv) {
  CLI::App app{"fp4serve: inference engine and OpenAI-compatible server for NVFP4 Mixture-of-Experts models"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("fp4serve ") + build::kVersion + " (" + build::kGitRevision + ")");
  register_inspect(app);
  register_synth(app);
  register_tokenize(app);
  register_doctor(app);
  register_run(app);
  register_chat(app);
  register_serve(app);
  register_bench(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << "\n";
    return 2;
  }
  return 0;
}

}  // namespace fp4serve::cli
