"""What a submission's tests may spend: the time of all its launches together (a task that
never returns would otherwise hold the grader for the launch limit times every case and
world size), and, per launch, its memory and its disk.

Memory is watched from the grader, for the whole launch: every POLL_S seconds the
proportional set sizes (Pss: a page shared by k processes counts 1/k in each, so shared
libraries and Open MPI's shared segments count once) of all the launch's processes are
added up, and a launch over its budget is killed. Dividing a fixed limit among the ranks
instead would need to know how many processes a launch makes, and would fail a launch
whose one rank needs more than its share. Each process is also held to the whole budget
by RLIMIT_DATA (confine.py), so one fast allocation cannot run past the budget between
two polls by more than the others hold. The disk (the launch's folder, /tmp, /dev/shm)
is one tmpfs of the budget's size (sandbox_root.py), so it cannot be exceeded; the
grader reads how full it is through the launch's /proc/PID/root."""
import os

POLL_S = 0.25


def _children():
    """{pid: [child pids]} of this machine's processes."""
    out = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])   # after "(comm) state"
        out.setdefault(ppid, []).append(int(name))
    return out


def _children_of(pid):
    """The child pids of pid from /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN)."""
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
    except OSError:
        pass
    return out


def processes_of(pid):
    """pid and every process below it: from each process's list of children where the
    kernel keeps one (a few files), else from every process's parent (all of /proc)."""
    if os.path.exists(f"/proc/{pid}/task/{pid}/children"):
        children = None
    else:
        children = _children()
    found, todo = [], [pid]
    while todo:
        p = todo.pop()
        found.append(p)
        todo += _children_of(p) if children is None else children.get(p, [])
    return found


def memory_kib(pid):
    """The memory of the launch whose first process is pid: the sum of its processes' Pss
    (their resident set size where the kernel has no smaps_rollup)."""
    total = 0
    for p in processes_of(pid):
        for path, key in ((f"/proc/{p}/smaps_rollup", "Pss:"), (f"/proc/{p}/status", "VmRSS:")):
            try:
                with open(path) as f:
                    line = next((ln for ln in f if ln.startswith(key)), None)
            except OSError:
                continue
            if line:
                total += int(line.split()[1])
                break
    return total


def disk_used(pid, size):
    """Bytes in use on the launch's root when /proc/PID/root is its tmpfs of `size` bytes
    (before the launch has entered it, or after it has ended: None)."""
    try:
        st = os.statvfs(f"/proc/{pid}/root/")
    except OSError:
        return None
    if st.f_blocks * st.f_frsize != size:
        return None
    return (st.f_blocks - st.f_bfree) * st.f_frsize


class LaunchWatch:
    """Called by process.run every POLL_S seconds with the launch's first pid: the reason
    to kill it (the words of a budget exceeded), or None."""

    def __init__(self, memory_mib, disk_mib=0, disk_size=0):
        self.memory_mib, self.disk_mib, self.disk_size = memory_mib, disk_mib, disk_size

    def __call__(self, pid):
        if self.memory_mib and memory_kib(pid) > self.memory_mib << 10:
            return (f"memory budget of {self.memory_mib} MiB exceeded (all the launch's "
                    "processes together; tools/grade --memory-limit sets it); the run was killed")
        used = disk_used(pid, self.disk_size) if self.disk_mib else None
        if used is not None and used > self.disk_mib << 20:
            from .sandbox_root import disk_exceeded
            return disk_exceeded(self.disk_mib) + "; the run was killed"
        return None


class TimeBudget:
    """The seconds all of a submission's test launches may take together; 0: no limit."""

    def __init__(self, seconds):
        self.seconds, self.spent = seconds, 0.0

    def words(self):
        return (f"the submission time budget of {self.seconds:g} s was spent (all its test "
                "launches together; tools/grade --submission-budget sets it)")

    def left(self):
        """Seconds left (None: no budget)."""
        return max(0.0, self.seconds - self.spent) if self.seconds else None

    def limit(self, timeout):
        """(the time limit of the next launch, whether the budget set it): its own limit,
        or what is left of the budget where that is less."""
        left = self.left()
        if left is None or (timeout is not None and timeout <= left):
            return timeout, False
        return left, True

    def charge(self, r, by_budget):
        """Counts a launch's time; a launch the budget's end killed says so."""
        self.spent += r.seconds
        if r.timed_out and by_budget:
            r.stopped = self.words() + "; the run was killed"

    def not_run(self):
        """The Run of a launch left out because the budget is spent."""
        from .process import Run
        r = Run(124, "", "", True, 0.0)
        r.stopped = self.words()
        return r
