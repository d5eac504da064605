// Whether a file can be written atomically where asked, checked before any work is done
// (atomic_file.h).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "mgpu/error.h"
#include "mgpu/io/atomic_file.h"

namespace mgpu::io {

void probe_writable(const std::string& path) {
  const std::string dir = parent_directory(path);
  const std::string name = path.substr(path.find_last_of('/') + 1);
  MGPU_CHECK(!name.empty(), path, " names a folder, not a file");
  const std::string tmp = dir + "/." + name + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MGPU_CHECK(fd >= 0, "cannot write ", path, ": creating ", tmp, ": ", std::strerror(errno));
  ::close(fd);
  ::unlink(tmp.c_str());
}

}  // namespace mgpu::io
