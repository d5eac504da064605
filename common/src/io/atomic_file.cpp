// Atomic file replacement: temporary file, fsync, rename, fsync of the folder.
#include "mgpu/io/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "mgpu/error.h"

namespace mgpu::io {

namespace {

std::string system_error(const std::string& what) {
  return what + ": " + std::strerror(errno);
}

// write() may write less than asked (signals, pipes, quotas): loop until all is written.
bool write_all(int fd, std::string_view bytes) {
  const char* p = bytes.data();
  std::size_t left = bytes.size();
  while (left > 0) {
    const ssize_t n = ::write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    left -= static_cast<std::size_t>(n);
  }
  return true;
}

}  // namespace

std::string parent_directory(const std::string& path) {
  const std::size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

void fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  MGPU_CHECK(fd >= 0, system_error("cannot open folder " + dir + " to fsync it"));
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  errno = saved;
  MGPU_CHECK(rc == 0, system_error("fsync of folder " + dir + " failed"));
}

void atomic_write_file(const std::string& path, const std::vector<std::string_view>& pieces) {
  const std::string dir = parent_directory(path);
  const std::string base = path.substr(path.find_last_of('/') + 1);
  // Same folder as the target: rename() is atomic only within one file system. The pid
  // keeps two processes that write the same name from sharing a temporary file.
  const std::string tmp = dir + "/." + base + ".tmp." + std::to_string(::getpid());

  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MGPU_CHECK(fd >= 0, system_error("cannot create " + tmp + " (to write " + path + ")"));
  std::string failed;  // the step that failed, if one did
  for (std::string_view piece : pieces)
    if (failed.empty() && !write_all(fd, piece)) failed = system_error("writing " + tmp);
  // Step 1) the data reaches the disk before any name points to it.
  if (failed.empty() && ::fsync(fd) != 0) failed = system_error("fsync of " + tmp);
  // close() reports write errors some file systems (NFS) only detect late.
  if (::close(fd) != 0 && failed.empty()) failed = system_error("closing " + tmp);
  // Step 2) one step from the old content to the new: readers see one or the other.
  if (failed.empty() && ::rename(tmp.c_str(), path.c_str()) != 0)
    failed = system_error("renaming " + tmp + " to " + path);
  if (!failed.empty()) {
    ::unlink(tmp.c_str());
    MGPU_FAIL(failed, "; ", path, " is unchanged");
  }
  // Step 3) the rename is an entry of the folder: fsync the folder to make it durable.
  fsync_directory(dir);
}

void atomic_write_file(const std::string& path, std::string_view bytes) {
  atomic_write_file(path, std::vector<std::string_view>{bytes});
}

std::string read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MGPU_CHECK(fd >= 0, system_error("cannot open " + path));
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const std::string msg = system_error("reading " + path);
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
