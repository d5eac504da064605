/// @file log.h
/// @brief Rank-aware printing: one line from rank 0, or one line per rank with its rank.
///
/// Each call writes its whole line with one write to the stream, so lines printed by
/// different ranks at the same time do not cut into each other (their order still varies).
#pragma once

#include <cstdio>
#include <string>

#include "mgpu/dist/runtime.h"
#include "mgpu/error.h"

namespace mgpu::dist {

namespace detail {
/// Writes `line` plus a newline to `out` in one call and flushes.
void write_line(std::FILE* out, const std::string& line);
}  // namespace detail

/// "[rank 3] " for this process.
std::string rank_prefix();

/// Prints the streamed arguments as one line on rank 0 only (stdout).
template <typename... Args>
void log0(const Args&... args) {
  if (rank() == 0) detail::write_line(stdout, ::mgpu::detail::concat(args...));
}
/// Prints the streamed arguments as one line on every rank, prefixed "[rank r] " (stdout).
template <typename... Args>
void log_all(const Args&... args) {
  detail::write_line(stdout, rank_prefix() + ::mgpu::detail::concat(args...));
}
/// As log_all, on stderr: for warnings and errors.
template <typename... Args>
void log_error(const Args&... args) {
  detail::write_line(stderr, rank_prefix() + ::mgpu::detail::concat(args...));
}

}  // namespace mgpu::dist
