// Interposed file system calls (see crash_points.h): write, fsync, close, rename, remove,
// unlink. A definition in the executable takes precedence over the C library's for every
// call in the process; each one forwards to the real function found with dlsym(RTLD_NEXT).
#include "crash_points.h"

#include <dlfcn.h>
#include <signal.h>
#include <sys/types.h>
#include <unistd.h>

#include <climits>

namespace {

int g_armed_at = 0;  // 0: not armed
bool g_before = true;
int g_calls = 0;
bool g_tracing = false;
std::vector<std::string> g_trace;

// Counts a call; kills the process when it is the armed one.
void crash_point(bool before) {
  if (g_armed_at == 0) return;
  if (before) ++g_calls;
  if (g_calls == g_armed_at && before == g_before) ::kill(::getpid(), SIGKILL);
}

void record(const std::string& what) {
  if (g_tracing) g_trace.push_back(what);
}

std::string fd_path(int fd) {
  char buf[PATH_MAX];
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  return n > 0 ? std::string(buf, static_cast<std::size_t>(n)) : "fd " + std::to_string(fd);
}

// Runs the real `name` with a crash point on each side of it.
template <typename Fn, typename... Args>
auto intercept(const char* name, Args... args) {
  static_assert(sizeof...(Args) > 0, "every interposed call has arguments");
  const auto real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
  crash_point(true);
  const auto r = real(args...);
  crash_point(false);
  return r;
}

}  // namespace

namespace mgpu::testing {

void arm_crash_point(int n, bool before) {
  g_armed_at = n;
  g_before = before;
  g_calls = 0;
}

int crash_point_calls() { return g_calls; }

void start_syscall_trace() {
  g_trace.clear();
  g_tracing = true;
}

std::vector<std::string> stop_syscall_trace() {
  g_tracing = false;
  return std::move(g_trace);
}

}  // namespace mgpu::testing

extern "C" {

ssize_t write(int fd, const void* buf, size_t n) {
  return intercept<ssize_t (*)(int, const void*, size_t)>("write", fd, buf, n);
}
int close(int fd) { return intercept<int (*)(int)>("close", fd); }
int fsync(int fd) {
  record("fsync " + fd_path(fd));
  return intercept<int (*)(int)>("fsync", fd);
}
int rename(const char* from, const char* to) {
  record(std::string("rename ") + from + " -> " + to);
  return intercept<int (*)(const char*, const char*)>("rename", from, to);
}
int remove(const char* path) {  // std::filesystem::remove calls it
  record(std::string("remove ") + path);
  return intercept<int (*)(const char*)>("remove", path);
}
int unlink(const char* path) {
  record(std::string("unlink ") + path);
  return intercept<int (*)(const char*)>("unlink", path);
}

}  // extern "C"

namespace mgpu::testing {

namespace {
// Index of the first entry of `trace` that satisfies `pred` at or after `from`; -1 if none.
template <typename Pred>
long find(const std::vector<std::string>& trace, long from, Pred pred) {
  for (long i = from; i < static_cast<long>(trace.size()); ++i)
    if (pred(trace[static_cast<std::size_t>(i)])) return i;
  return -1;
}
bool starts(const std::string& s, const std::string& p) { return s.compare(0, p.size(), p) == 0; }
}  // namespace

std::string check_save_protocol(const std::vector<std::string>& trace, const std::string& dir,
                                const std::string& name) {
  long cursor = 0;
  for (const std::string& target : {dir + "/" + name, dir + "/latest"}) {
    // The rename that puts the file in place: from a temporary file of the same folder.
    const long r = find(trace, cursor, [&](const std::string& e) {
      return starts(e, "rename ") && e.size() > target.size() &&
             e.compare(e.size() - target.size(), target.size(), target) == 0;
    });
    if (r < 0) return "no rename(temporary file, " + target + "): the file must appear in one step";
    const std::string& e = trace[static_cast<std::size_t>(r)];
    const std::string from = e.substr(7, e.size() - 7 - 4 - target.size());
    if (from.rfind('/') == std::string::npos || from.substr(0, from.rfind('/')) != dir)
      return "the temporary file " + from + " is not in " + dir + " (rename is atomic only within one file system)";
    // Its data fsync'ed before the rename (after it, a crash could leave the new name on
    // an empty or partial file).
    if (find(trace, cursor, [&](const std::string& x) { return x == "fsync " + from; }) < 0 ||
        find(trace, cursor, [&](const std::string& x) { return x == "fsync " + from; }) > r)
      return "no fsync of " + from + " before renaming it to " + target;
    // The folder fsync'ed after the rename (the rename is a change of the folder).
    const long d = find(trace, r + 1, [&](const std::string& x) { return x == "fsync " + dir; });
    if (d < 0) return "no fsync of the folder " + dir + " after renaming " + target;
    cursor = d + 1;
  }
  // Removals of checkpoints only after latest names the new one.
  const long removal = find(trace, 0, [&](const std::string& x) {
    return (starts(x, "remove ") || starts(x, "unlink ")) && x.find("/step-") != std::string::npos &&
           x.find(".tmp.") == std::string::npos;
  });
  if (removal >= 0 && removal < cursor)
    return "a checkpoint was removed (" + trace[static_cast<std::size_t>(removal)] +
           ") before latest named the new one";
  return "";
}

}  // namespace mgpu::testing
