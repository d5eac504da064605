// Whether a key begins with a prefix ("model.", "optim.", "module."): the checkpoint files'
// names are read by prefix in several places of io/.
#pragma once

#include <string>

namespace mgpu::io {

/// True when `s` begins with `prefix` (C++20's std::string::starts_with).
inline bool starts_with(const std::string& s, const std::string& prefix) {
  return s.compare(0, prefix.size(), prefix) == 0;
}

}  // namespace mgpu::io
