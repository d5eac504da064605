"""One command run under a time limit, in its own process group, so that a hung mpirun and
its ranks die together; what it printed comes back even when it is killed. Used by the
launches of running.py and by confine.py's probe (a module of its own, so neither of those
imports the other)."""
import os
import re
import signal
import subprocess
import time

from .budgets import POLL_S


class Run:
    def __init__(self, rc, stdout, stderr, timed_out, seconds):
        self.rc, self.stdout, self.stderr = rc, stdout, stderr
        self.timed_out, self.seconds = timed_out, seconds
        self.stopped = None   # why the grader stopped it (a budget), in words

    def why_incomplete(self, timeout, inside=True):
        if self.stopped:
            return self.stopped
        if self.timed_out:
            if timeout:
                return f"timed out after {timeout:g} s; the run was killed"
            return f"killed after {self.seconds:.0f} s"
        if self.rc < 0:
            try:
                name = signal.Signals(-self.rc).name
            except ValueError:
                name = f"signal {-self.rc}"
            return f"crashed ({name})"
        return f"the run ended (exit status {self.rc})" + (" inside this test case" if inside else "")

    def tail(self, n=12):
        """What the run printed besides the XML report: the lines that say what went
        wrong (the library's errors, a timeout, a signal) first, else the last lines."""
        out = self.stdout
        for mark in ("<?xml", "<Catch"):
            if mark in out:
                out = out[:out.index(mark)] + out[out.rfind("</Catch>") + 8:] \
                    if "</Catch>" in out else out[:out.index(mark)]
                break
        lines = [ln for ln in (self.stderr + "\n" + out).splitlines() if ln.strip()]
        telling = [ln for ln in lines if re.search(r"mgpu|timeout|error|Error|SIG|FAILED", ln)
                   and not re.search(r"ORTE_ERROR_LOG|help_aggregate|with errorcode", ln)]
        return "\n".join(telling[:n] if telling else lines[-n:])


def _kill_group(proc):
    """SIGTERM to the group (Catch2 reports the case it interrupted), then SIGKILL to what
    is left of it, even when the launcher itself has ended (its children may not have)."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


def _wait(proc, timeout, watch):
    """(stdout, stderr, why it was stopped or None) of proc, ended by its time limit
    (TimeoutExpired) or by `watch` (called every POLL_S seconds with its pid: the reason
    to stop it, or None)."""
    if watch is None:
        return (*proc.communicate(timeout=timeout), None)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        step = POLL_S if deadline is None else min(POLL_S, max(0.0, deadline - time.monotonic()))
        try:
            return (*proc.communicate(timeout=step), None)
        except subprocess.TimeoutExpired:
            if deadline is not None and time.monotonic() >= deadline:
                raise
        why = watch(proc.pid)
        if why:
            _kill_group(proc)
            out, err = _remains(proc)
            return out, err, why


def _remains(proc):
    """What a killed proc printed (nothing where a grandchild escaped its group and holds
    the pipe)."""
    try:
        return proc.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        return b"", b""


def run(cmd, timeout, env=None, cwd=None, watch=None):
    """Runs cmd in its own process group; timeout None means no limit. On timeout kills
    the whole group (mpirun and its ranks too) and returns what had been printed; so too
    when `watch` (see _wait) says why it must stop (Run.stopped)."""
    start = time.monotonic()
    try:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=env, cwd=cwd, start_new_session=True)
    except OSError as e:
        return Run(127, "", f"cannot run {cmd[0]}: {e}", False, 0.0)
    timed_out, stopped = False, None
    try:
        out, err, stopped = _wait(proc, timeout, watch)
    except subprocess.TimeoutExpired:
        timed_out = True
        _kill_group(proc)
        out, err = _remains(proc)
    r = Run(proc.returncode if not timed_out else 124,
            out.decode("utf-8", "replace"), err.decode("utf-8", "replace"),
            timed_out, time.monotonic() - start)
    if stopped:
        r.rc, r.stopped = -signal.SIGKILL, stopped
    return r
