#include "util/byte_size.h"

#include <cctype>
#include <cmath>
#include <cstdlib>

#include "util/error.h"

namespace fp4serve {

std::uint64_t parse_byte_size(const std::string& text, const std::string& flag) {
  auto bad = [&] { fail(flag, ": '", text, "' is not a size (examples: 4GiB, 512MB, 1073741824)"); };
  std::size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) bad();
  char* end = nullptr;
  const std::string number = text.substr(0, i);
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size()) bad();
  std::string unit;
  for (std::size_t j = i; j < text.size(); ++j) {
    if (text[j] == ' ') continue;
    unit.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(text[j]))));
  }
  double scale = 1.0;
  if (unit.empty() || unit == "b") scale = 1.0;
  else if (unit == "k" || unit == "kib") scale = 1024.0;
  else if (unit == "m" || unit == "mib") scale = 1024.0 * 1024.0;
  else if (unit == "g" || unit == "gib") scale = 1024.0 * 1024.0 * 1024.0;
  else if (unit == "t" || unit == "tib") scale = 1024.0 * 1024.0 * 1024.0 * 1024.0;
  else if (unit == "kb") scale = 1e3;
  else if (unit == "mb") scale = 1e6;
  else if (unit == "gb") scale = 1e9;
  else if (unit == "tb") scale = 1e12;
  else bad();
  const double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes >= 1.8e19) bad();
  return static_cast<std::uint64_t>(std::llround(bytes));
}

}  // namespace fp4serve
