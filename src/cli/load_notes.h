#pragma once
// What run, chat, serve and bench tell the user after loading a model: the kernel decisions, the
// quantization and weight-loading notes, and the --check-weights result.
#include <ostream>

#include "engine/runtime.h"

namespace fp4serve::cli {

// `kernel_report`: the full backend decision report first (bench prints its own one-line summary).
void print_load_notes(const engine::Runtime& rt, std::ostream& out, bool kernel_report = true);

}  // namespace fp4serve::cli
