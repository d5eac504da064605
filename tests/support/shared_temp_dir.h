// Test helper for checkpoints across ranks: a temporary folder every rank sees (rank 0
// creates it; the others learn its name by a broadcast over the tests' cpu_group()).
#pragma once

#include <stdlib.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#include "groups.h"
#include "mgpu/tensor.h"
#include "temp_dir.h"

namespace mgpu::testing {

/// A fresh folder /tmp/<prefix>-XXXXXX made by rank 0, its name known to every rank.
/// Collective over cpu_group().
inline std::string shared_temp_dir(const std::string& prefix) {
  std::vector<std::int32_t> name(64, 0);
  if (cpu_group().rank() == 0) {
    std::string pattern = "/tmp/" + prefix + "-XXXXXX";
    if (pattern.size() >= 4 * name.size()) throw std::invalid_argument("shared_temp_dir: prefix too long");
    if (::mkdtemp(pattern.data()) == nullptr) throw std::runtime_error("shared_temp_dir: mkdtemp failed");
    std::memcpy(name.data(), pattern.c_str(), pattern.size() + 1);
  }
  Tensor t = Tensor::from_vector(name, {static_cast<std::int64_t>(name.size())});
  cpu_group().broadcast(t, 0).wait();
  name = t.to_vector<std::int32_t>();
  return reinterpret_cast<const char*>(name.data());
}

/// shared_temp_dir(), removed by rank 0 after a barrier when the object goes away.
class SharedTempDir : public ScratchFolder {
 public:
  explicit SharedTempDir(const std::string& prefix) : ScratchFolder(shared_temp_dir(prefix)) {}
  ~SharedTempDir() {
    cpu_group().barrier().wait();
    if (cpu_group().rank() == 0) std::filesystem::remove_all(path());
  }
};

}  // namespace mgpu::testing
