// Generic (no ISA flags) helpers the instruction-set files call.
#include "kernels/isa_kernels.h"
#include "util/error.h"
#include "util/thread_pool.h"

namespace fp4serve::kernels {

void isa_unsupported(const char* what) { fail(what); }

std::int64_t kernel_threads() { return global_thread_pool().size(); }

}  // namespace fp4serve::kernels
