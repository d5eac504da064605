// Crash points for tests of atomic saves: this test binary interposes the file system calls
// a save makes (write, fsync, close, rename, remove, unlink) and can kill its own process
// with SIGKILL - the signal `kill -9` sends - at the n-th of them, just before or just
// after it runs. A test forks, arms the child, lets it save, and checks what the kill left
// on disk; n = 1, 2, 3, ... visits every instant between two system calls of the protocol.
// The calls can also be recorded (a trace), to check what no kill can show: that the data
// is fsync'ed before it is renamed into place, and the folder after.
#pragma once

#include <string>
#include <vector>

namespace mgpu::testing {

/// From now on in this process: SIGKILL at the n-th interposed call (n >= 1), before it
/// runs when `before`, otherwise right after it returned.
void arm_crash_point(int n, bool before);
/// Interposed calls seen since arm_crash_point (0 when not armed).
int crash_point_calls();

/// Starts recording fsync, rename, remove and unlink calls (fsync with the path of its
/// file descriptor): "fsync PATH", "rename FROM -> TO", "remove PATH", "unlink PATH".
void start_syscall_trace();
/// The calls recorded since start_syscall_trace (and stops recording).
std::vector<std::string> stop_syscall_trace();

/// Checks a trace of one save of checkpoint `name` into `dir`: the file is written under a
/// temporary name in `dir`, fsync'ed, renamed to dir/name, then `dir` is fsync'ed; then the
/// same for dir/latest; old checkpoints are removed only after that. Returns "" or what is
/// wrong.
std::string check_save_protocol(const std::vector<std::string>& trace, const std::string& dir,
                                const std::string& name);

}  // namespace mgpu::testing
