/// @file error.h
/// @brief mgpu::Error and the checking macros every op uses.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace mgpu {

/// The one exception type of the library. Its message names the op and what was wrong,
/// and, where there is one, how to fix it.
class Error : public std::runtime_error {
 public:
  /// `what` is the full message: op name, operands, and the fix where there is one.
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

namespace detail {
/// Concatenates any streamable values into one string (used by MGPU_CHECK).
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}
}  // namespace detail

}  // namespace mgpu

/// Throws mgpu::Error with the streamed message when `cond` is false.
/// Example: MGPU_CHECK(a.numel() == b.numel(), "add: ", a.shape_str(), " vs ", b.shape_str());
#define MGPU_CHECK(cond, ...)                                       \
  do {                                                              \
    if (!(cond)) throw ::mgpu::Error(::mgpu::detail::concat(__VA_ARGS__)); \
  } while (0)

/// Throws mgpu::Error unconditionally with the streamed message.
#define MGPU_FAIL(...) throw ::mgpu::Error(::mgpu::detail::concat(__VA_ARGS__))
