#include "cli/load_notes.h"

#include <string>

namespace fp4serve::cli {

void print_load_notes(const engine::Runtime& rt, std::ostream& out, bool kernel_report) {
  if (kernel_report) out << rt.kernels->report().to_text();
  for (const std::string& w : rt.warnings) out << "note: " << w << "\n";
  if (rt.weight_check) {
    out << "check-weights: " << rt.weight_check->tensors << " tensors, " << rt.weight_check->values
        << " values, no NaN or Inf\n";
  }
  out.flush();
}

}  // namespace fp4serve::cli
