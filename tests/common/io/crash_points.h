// Crash points for tests of atomic saves: this test binary interposes the file system calls
// a save makes (write, fsync, close, rename, remove, unlink) and can kill its own process with
// SIGKILL - the signal `kill -9` sends - at the n-th of them, just before or just after it
// runs. A test forks, arms the child, lets it save, and checks what the kill left on disk;
// n = 1, 2, 3, ... visits every instant between two system calls of the protocol.
#pragma once

namespace mgpu::testing {

/// From now on in this process: SIGKILL at the n-th interposed call (n >= 1), before it
/// runs when `before`, otherwise right after it returned.
void arm_crash_point(int n, bool before);
/// Interposed calls seen since arm_crash_point (0 when not armed).
int crash_point_calls();

}  // namespace mgpu::testing
