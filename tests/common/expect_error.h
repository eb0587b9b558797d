#pragma once
// Runs `fn`, expecting an fp4serve::Error whose message contains every one of `parts`: the
// project's rule is that every bad input names the file, tensor, field or parameter at fault.
#include <gtest/gtest.h>

#include <functional>
#include <initializer_list>
#include <string>

#include "util/error.h"

namespace fp4serve::testing {

inline void expect_error(const std::function<void()>& fn, std::initializer_list<std::string> parts) {
  try {
    fn();
  } catch (const Error& e) {
    const std::string msg = e.what();
    for (const std::string& p : parts) EXPECT_NE(msg.find(p), std::string::npos) << "missing '" << p << "' in: " << msg;
    return;
  }
  ADD_FAILURE() << "no error thrown";
}

}  // namespace fp4serve::testing
