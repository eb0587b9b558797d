#pragma once
// Sizes on the command line: "4GiB", "512MB", "1.5G", "1048576". Binary (KiB, MiB, GiB, TiB)
// and decimal (KB, MB, GB, TB; K/M/G/T alone are binary, as most tools read them) suffixes,
// case-insensitive, optional "B".
#include <cstdint>
#include <string>

namespace fp4serve {

// Throws Error naming `flag` and the text when it is not a size.
std::uint64_t parse_byte_size(const std::string& text, const std::string& flag);

}  // namespace fp4serve
