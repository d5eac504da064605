// Checks of the errors a call reports: the message of the mgpu::Error it throws, and
// whether a message says what it should.
#pragma once

#include <catch2/catch.hpp>

#include <string>

#include "mgpu/error.h"

namespace mgpu::testing {

/// True when `part` occurs in `text`.
inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

/// The message of the mgpu::Error `f` throws; fails the test if it throws none.
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const mgpu::Error& e) {
    return e.what();
  }
  FAIL("expected an mgpu::Error, nothing was thrown");
  return "";
}

}  // namespace mgpu::testing
