// Kill -9 during a checkpoint save, at every instant and at random times, and what it must
// leave behind. Used by the library's tests and by lesson 07's graded tests; needs
// crash_points.cpp linked into the test binary.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <random>
#include <string>
#include <thread>

#include "crash_points.h"
#include "io_files.h"

namespace mgpu::testing {

/// The save under test: commit(dir, name, bytes, keep_last) writes checkpoint `name` with
/// content `bytes` into `dir`, points dir/latest at it and keeps the newest keep_last.
using CommitFn = std::function<void(const std::string& dir, const std::string& name,
                                    const std::string& bytes, int keep_last)>;

/// What a run of kills found.
struct KillReport {
  int instants = 0;   ///< system calls one save makes (crash points per side)
  int kills = 0;      ///< saves killed and checked
  std::string error;  ///< the first thing found wrong ("" if none)
};

/// What a killed save must leave in `dir`, where checkpoint `old_name` (content `old_bytes`)
/// was complete before it started writing `new_name` (`new_bytes`): `latest` names one of
/// the two, and that file holds exactly its content; every checkpoint file present is
/// complete (one of the two contents). Returns "" or what is wrong.
inline std::string check_after_kill(const std::string& dir, const std::string& old_name,
                                    const std::string& old_bytes, const std::string& new_name,
                                    const std::string& new_bytes) {
  namespace fs = std::filesystem;
  if (!fs::exists(dir + "/latest")) return "latest is missing";
  std::string latest = slurp(dir + "/latest");
  while (!latest.empty() && (latest.back() == '\n' || latest.back() == ' ')) latest.pop_back();
  if (latest != old_name && latest != new_name) return "latest holds '" + latest + "'";
  const std::string expect = latest == old_name ? old_bytes : new_bytes;
  if (!fs::exists(dir + "/" + latest)) return "latest names " + latest + ", which is missing";
  if (slurp(dir + "/" + latest) != expect) return "latest names " + latest + ", which is incomplete or wrong";
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string f = e.path().filename().string();
    if (f == old_name && slurp(e.path()) != old_bytes) return f + " is damaged";
    if (f == new_name && slurp(e.path()) != new_bytes) return f + " is present but incomplete";
  }
  return "";
}

/// Runs `commit` in a child process that is killed at its n-th system call (before it, or
/// right after it), for n = 1, 2, ... until a save completes, with `old` committed first.
/// Each kill is checked with check_after_kill.
inline KillReport kill_at_every_instant(const CommitFn& commit, const std::string& old_bytes,
                                        const std::string& new_bytes, int keep_last) {
  KillReport report;
  const std::string old_name = "step-00000001.safetensors", new_name = "step-00000002.safetensors";
  for (bool before : {true, false}) {
    for (int n = 1; n < 10000; ++n) {
      TempDir tmp;
      const std::string dir = tmp.file("ckpt");
      commit(dir, old_name, old_bytes, keep_last);
      std::fflush(nullptr);  // nothing buffered is written twice by the child
      const pid_t pid = ::fork();
      if (pid == 0) {
        arm_crash_point(n, before);
        try {
          commit(dir, new_name, new_bytes, keep_last);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "the save threw: %s\n", e.what());
          ::_exit(1);
        }
        ::_exit(0);
      }
      int status = 0;
      ::waitpid(pid, &status, 0);
      if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {  // no n-th call: the save is done
        report.instants = n - 1;
        const std::string done = check_after_kill(dir, old_name, old_bytes, new_name, new_bytes);
        if (report.error.empty() && slurp(dir + "/latest").rfind(new_name, 0) != 0)
          report.error = "a completed save left latest naming the old checkpoint";
        if (report.error.empty() && !done.empty()) report.error = "after a completed save: " + done;
        break;
      }
      if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL) {
        report.error = "the saving process failed on its own (exit status " +
                       std::to_string(WIFEXITED(status) ? WEXITSTATUS(status) : -1) + ")";
        return report;
      }
      ++report.kills;
      const std::string wrong = check_after_kill(dir, old_name, old_bytes, new_name, new_bytes);
      if (!wrong.empty() && report.error.empty())
        report.error = "killed " + std::string(before ? "before" : "after") + " system call " +
                       std::to_string(n) + " of the save: " + wrong;
    }
  }
  return report;
}

/// Kills a process that saves checkpoints one after another at `kills` random instants
/// (up to `max_ms` after it started); after each, the newest complete checkpoint must be
/// loadable through `latest`. `make_bytes(step)` is the content of step `step`.
inline KillReport kill_at_random_times(const CommitFn& commit,
                                       const std::function<std::string(int)>& make_bytes,
                                       int kills, int max_ms, int keep_last) {
  KillReport report;
  std::mt19937 rng(12345);
  for (int k = 0; k < kills; ++k) {
    TempDir tmp;
    const std::string dir = tmp.file("ckpt");
    commit(dir, "step-00000000.safetensors", make_bytes(0), keep_last);
    std::fflush(nullptr);
    const pid_t pid = ::fork();
    if (pid == 0) {
      for (int step = 1; step < 1000000; ++step) {
        char name[64];
        std::snprintf(name, sizeof name, "step-%08d.safetensors", step);
        commit(dir, name, make_bytes(step), keep_last);
      }
      ::_exit(0);
    }
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % (1000u * static_cast<unsigned>(max_ms))));
    ::kill(pid, SIGKILL);
    int status = 0;
    ::waitpid(pid, &status, 0);
    ++report.kills;
    std::string latest = slurp(dir + "/latest");
    while (!latest.empty() && latest.back() == '\n') latest.pop_back();
    const int step = latest.size() > 13 ? std::atoi(latest.c_str() + 5) : -1;
    std::string wrong;
    if (step < 0) wrong = "latest holds '" + latest + "'";
    else if (slurp(dir + "/" + latest) != make_bytes(step)) wrong = latest + " is incomplete";
    if (!wrong.empty() && report.error.empty())
      report.error = "random kill " + std::to_string(k) + ": " + wrong;
  }
  return report;
}

}  // namespace mgpu::testing
