#pragma once
// One exception type for every user-facing failure. The message must name the file, tensor, field
// or parameter at fault: the CLI prints it verbatim and exits non-zero.
#include <sstream>
#include <stdexcept>
#include <string>

namespace fp4serve {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// fail("tensor '", name, "' in ", file, ": shape mismatch") builds the message from its parts.
template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Error(os.str());
}

}  // namespace fp4serve
