// A scratch folder for one test, removed at its end.
#pragma once

#include <stdlib.h>

#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

namespace mgpu::testing {

/// A folder's path and the paths of files in it; not copyable, since its owner removes it
/// (TempDir here, SharedTempDir in shared_temp_dir.h).
class ScratchFolder {
 public:
  ScratchFolder(const ScratchFolder&) = delete;
  ScratchFolder& operator=(const ScratchFolder&) = delete;
  /// The folder's path.
  const std::string& path() const { return path_; }
  /// path()/name.
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 protected:
  explicit ScratchFolder(std::string path) : path_(std::move(path)) {}
  ~ScratchFolder() = default;

 private:
  std::string path_;
};

/// A unique empty folder under /tmp for one test; removed by the destructor.
class TempDir : public ScratchFolder {
 public:
  TempDir() : ScratchFolder(make()) {}
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path(), ignored);
  }

 private:
  static std::string make() {
    char name[] = "/tmp/mgpu-test-XXXXXX";
    if (::mkdtemp(name) == nullptr) throw std::runtime_error("mkdtemp failed");
    return name;
  }
};

}  // namespace mgpu::testing
