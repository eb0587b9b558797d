#pragma once
// `fp4serve <subcommand>`: each subcommand lives in its own cmd_*.cpp and registers itself here.
namespace CLI {
class App;
}

namespace fp4serve::cli {

int run_app(int argc, char** argv);

// One per subcommand file. Each adds its subcommand and the callback that runs it.
void register_inspect(CLI::App& app);
void register_synth(CLI::App& app);
void register_tokenize(CLI::App& app);  // tokenize, detokenize, template
void register_doctor(CLI::App& app);
void register_run(CLI::App& app);   // run (cmd_run.cpp)
void register_chat(CLI::App& app);  // chat (cmd_run.cpp)
void register_serve(CLI::App& app);  // serve (cmd_serve.cpp)
void register_bench(CLI::App& app);

}  // namespace fp4serve::cli
