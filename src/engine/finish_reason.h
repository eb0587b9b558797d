#pragma once
// Why a generation ended; shared by Session::generate and the scheduler's request streams.
#include <string_view>

namespace fp4serve::engine {

enum class FinishReason { Length, Stop, Cancelled };
std::string_view finish_reason_name(FinishReason reason);  // "length", "stop", "cancelled"

}  // namespace fp4serve::engine
