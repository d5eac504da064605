// Reading files and naming folders. Writing them atomically (atomic_replace,
// fsync_directory) is lesson 07's task 3 (atomic_file.h).
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "mgpu/error.h"
#include "mgpu/io/atomic_file.h"

namespace mgpu::io {

std::string parent_directory(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MGPU_CHECK(fd >= 0, "cannot open " + path + ": " + std::strerror(errno));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string msg = "reading " + path + ": " + std::strerror(errno);
      ::close(fd);
      MGPU_FAIL(msg);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return out;
}

}  // namespace mgpu::io
