// Reading files and naming folders. Writing them atomically (atomic_replace,
// fsync_directory) is lesson 07's task 3 (atomic_file.h).
#include <fcntl.h>
#include <sys/stat.h>
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

namespace {

std::string kind_of(mode_t mode) {
  if (S_ISREG(mode)) return "a regular file";
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
  if (S_ISSOCK(mode)) return "a socket";
  return "not a regular file";
}

}  // namespace

std::string describe_path(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) return kind_of(st.st_mode);
  const int err = errno;
  struct stat lst {};
  if (err == ELOOP) return "a symlink loop";
  if (::lstat(path.c_str(), &lst) == 0 && S_ISLNK(lst.st_mode)) return "a dangling symlink";
  if (err == ENOENT) return "missing";
  return std::string("not accessible (") + std::strerror(err) + ")";
}

int open_regular_file(const std::string& path) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    const int err = errno;
    if (err == ELOOP || err == ENOENT) {
      const std::string what = describe_path(path);
      if (what != "missing") MGPU_FAIL("cannot open ", path, ": it is ", what, ", not a regular file");
    }
    MGPU_FAIL("cannot open ", path, ": ", std::strerror(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const std::string what = ::fstat(fd, &st) == 0 ? kind_of(st.st_mode) : std::strerror(errno);
    ::close(fd);
    MGPU_FAIL("cannot read ", path, ": it is ", what, ", not a regular file");
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);  // a regular file: plain reads
  return fd;
}

std::string read_file(const std::string& path) {
  const int fd = open_regular_file(path);
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
