#include "kernels/scratch.h"

#include <cstdlib>
#include <memory>
#include <new>

#include "util/error.h"

namespace fp4serve::kernels {

namespace {

struct FreeDeleter {
  void operator()(void* p) const { std::free(p); }
};

struct Slot {
  std::unique_ptr<void, FreeDeleter> data;
  std::size_t bytes = 0;
};

}  // namespace

void* thread_scratch(int slot, std::size_t bytes) {
  thread_local Slot slots[kScratchSlots];
  if (slot < 0 || slot >= kScratchSlots) fail("thread_scratch: slot ", slot, " out of range");
  Slot& s = slots[slot];
  if (s.bytes < bytes || !s.data) {
    // Round up so a sequence of slightly growing requests does not reallocate every time.
    const std::size_t want = ((bytes + bytes / 4 + 4095) / 4096) * 4096;
    void* p = std::aligned_alloc(64, want);
    if (p == nullptr) throw std::bad_alloc();
    s.data.reset(p);
    s.bytes = want;
  }
  return s.data.get();
}

}  // namespace fp4serve::kernels
