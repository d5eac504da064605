#!/usr/bin/env python3
"""Runs a command that must fail, and fails itself unless the command ends within the time
limit, with a non-zero exit status, and prints every --expect text and a match for every
--expect-regex, no --reject text and no line matching a --reject-regex. Used for the jobs
that must end with a clear message instead of hanging (a skipped collective, a shape
mismatch)."""
import argparse
import os
import re
import signal
import subprocess
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--expect", action="append", default=[], help="text the output must contain")
    ap.add_argument("--expect-regex", action="append", default=[],
                    help="a Python regular expression the output must match somewhere")
    ap.add_argument("--reject", action="append", default=[], help="text the output must not contain")
    ap.add_argument("--reject-regex", action="append", default=[],
                    help="a Python regular expression no line of the output may match")
    ap.add_argument("--time-limit", type=float, default=60.0, help="seconds before it counts as a hang")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        ap.error("no command given")
    # Own session, so that a hang can be ended with all of mpirun's children.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=args.time_limit)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        print(out)
        print(f"FAIL: still running after {args.time_limit:g} s: it hung instead of failing")
        return 1
    print(out)
    if proc.returncode == 0:
        print("FAIL: the command succeeded, but it was expected to fail")
        return 1
    missing = [e for e in args.expect if e not in out]
    missing += ["regex " + e for e in args.expect_regex if not re.search(e, out)]
    if missing:
        print("FAIL: exit status %d, but the output lacks: %s" % (proc.returncode, missing))
        return 1
    present = [r for r in args.reject if r in out]
    present += ["regex " + r for r in args.reject_regex
                if any(re.search(r, line) for line in out.splitlines())]
    if present:
        print("FAIL: exit status %d, but the output has: %s" % (proc.returncode, present))
        return 1
    print("PASS: failed as expected (exit status %d) with the expected message" % proc.returncode)
    return 0


if __name__ == "__main__":
    sys.exit(main())
