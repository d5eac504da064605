// Interposed file system calls (see crash_points.h): write, fsync, close, rename, remove,
// unlink. A definition in the executable takes
// precedence over the C library's for every call in the process; each one forwards to the
// real function found with dlsym(RTLD_NEXT).
#include "crash_points.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

namespace {
int g_armed_at = 0;  // 0: not armed
bool g_before = true;
int g_calls = 0;

template <typename F>
F real(const char* name) {
  return reinterpret_cast<F>(dlsym(RTLD_NEXT, name));
}

// Counts a call; kills the process when it is the armed one.
void crash_point(bool before) {
  if (g_armed_at == 0) return;
  if (before) ++g_calls;
  if (g_calls == g_armed_at && before == g_before) ::kill(::getpid(), SIGKILL);
}
}  // namespace

namespace mgpu::testing {

void arm_crash_point(int n, bool before) {
  g_armed_at = n;
  g_before = before;
  g_calls = 0;
}

int crash_point_calls() { return g_calls; }

}  // namespace mgpu::testing

extern "C" {

ssize_t write(int fd, const void* buf, size_t n) {
  static auto f = real<ssize_t (*)(int, const void*, size_t)>("write");
  crash_point(true);
  const ssize_t r = f(fd, buf, n);
  crash_point(false);
  return r;
}

int fsync(int fd) {
  static auto f = real<int (*)(int)>("fsync");
  crash_point(true);
  const int r = f(fd);
  crash_point(false);
  return r;
}

int close(int fd) {
  static auto f = real<int (*)(int)>("close");
  crash_point(true);
  const int r = f(fd);
  crash_point(false);
  return r;
}

int rename(const char* from, const char* to) {
  static auto f = real<int (*)(const char*, const char*)>("rename");
  crash_point(true);
  const int r = f(from, to);
  crash_point(false);
  return r;
}

int remove(const char* path) {  // std::filesystem::remove calls it
  static auto f = real<int (*)(const char*)>("remove");
  crash_point(true);
  const int r = f(path);
  crash_point(false);
  return r;
}

int unlink(const char* path) {
  static auto f = real<int (*)(const char*)>("unlink");
  crash_point(true);
  const int r = f(path);
  crash_point(false);
  return r;
}

}  // extern "C"
