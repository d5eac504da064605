#!/usr/bin/env python3
"""Lesson 07's demonstration as a test: kill -9 a DDP training mid-run, resume it, and get
exactly the run that was never interrupted (CPU).

  python3 tests/07_checkpointing/kill_resume.py --train build/solutions/07_checkpointing/train \
      --mpirun tools/mpirun [--np 2]

1. the uninterrupted run, without checkpoints;
2. the same run with --checkpoint-dir and --save-every, killed with SIGKILL (one rank,
   as a node failure would) once a checkpoint of step >= --kill-after exists;
3. the same command with --resume auto.
The resumed run's `final:` test_acc and train_loss and its weights fingerprint (and, for a
program with a GradScaler, its `scaler:` line) must equal the uninterrupted run's. Prints
each command and its last lines; the last line is `N passed, M failed`.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

PASSED, FAILED = [], []


def check(name, ok, detail=""):
    (PASSED if ok else FAILED).append(name)
    print(f"{'ok    ' if ok else 'FAILED'}  {name}" + (f"\n        {detail}" if detail and not ok else ""),
          flush=True)


def children(pid):
    """The processes whose parent is `pid` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                out.append(int(entry))
        except (OSError, IndexError, ValueError):
            pass
    return out


def latest_step(folder):
    try:
        with open(os.path.join(folder, "latest")) as f:
            m = re.fullmatch(r"step-(\d+)\.safetensors\n", f.read())
        return int(m.group(1)) if m else -1
    except OSError:
        return -1


def summary(out):
    """(test_acc, train_loss) of the final: line and the weights fingerprint."""
    final = re.search(r"^final: test_acc=(\S+) train_loss=(\S+)", out, re.M)
    weights = re.search(r"^weights: fnv1a64=([0-9a-f]+)", out, re.M)
    return (final.groups() if final else None), (weights.group(1) if weights else None)


def scaler_line(out):
    """The `scaler: scale=S growth_tracker=T` line of a program with a GradScaler, or None."""
    m = re.search(r"^scaler: (.*)$", out, re.M)
    return m.group(1).strip() if m else None


def rank_processes(pid, program):
    """The processes below `pid` that run `program`: mpirun's children, or its grandchildren
    when `pid` is tools/mpirun (a script that runs mpirun)."""
    want, found, todo = os.path.realpath(program), [], children(pid)
    while todo:
        p = todo.pop(0)
        try:
            exe = os.path.realpath(f"/proc/{p}/exe")
        except OSError:
            exe = ""
        if exe == want:
            found.append(p)
        else:
            todo += children(p)
    return found


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", required=True)
    ap.add_argument("--mpirun", required=True, help="mpirun, or tools/mpirun")
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--data", default="/usr/share/datasets/fashion-mnist",
                    help="--data of the runs (the Debian Fashion-MNIST folder by default)")
    ap.add_argument("--kill-after", type=int, default=30, help="kill once this step is saved")
    ap.add_argument("--time-limit", type=float, default=240, help="seconds per run")
    ap.add_argument("--extra", default="",
                    help="more flags for every run, one string (lesson 08: '--precision fp16 ...')")
    args = ap.parse_args()

    launch = [args.mpirun, "-np", str(args.np)]
    with open(shutil.which(args.mpirun) or args.mpirun, "rb") as f:
        wrapper = f.read(2) == b"#!"  # tools/mpirun, a script, adds these itself
    if not wrapper:
        launch += ["--oversubscribe", "--allow-run-as-root", "--mca", "mpi_yield_when_idle", "1"]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    flags = [args.train, "--data", args.data, "--train-samples", "4000", "--epochs", "3",
             "--batch-size", "32", "--model", "mlp", "--lr", "0.05", "--seed", "7"] + args.extra.split()
    tmp = tempfile.mkdtemp(prefix="mgpu-kill-resume-")
    folder = os.path.join(tmp, "checkpoints")
    ckpt = ["--checkpoint-dir", folder, "--save-every", "10", "--keep-last", "2"]
    try:
        def run(cmd):
            print("$ " + " ".join(cmd), flush=True)
            r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.time_limit)
            print("  " + "\n  ".join((r.stdout + r.stderr).strip().splitlines()[-4:]), flush=True)
            return r

        # 1. Uninterrupted.
        straight = run(launch + flags)
        check("the uninterrupted run finishes", straight.returncode == 0, straight.stderr[-800:])

        # 2. Killed with SIGKILL once step >= kill_after is saved.
        cmd = launch + flags + ckpt
        print("$ " + " ".join(cmd) + "    (killed with SIGKILL mid-run)", flush=True)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        deadline = time.time() + args.time_limit
        while latest_step(folder) < args.kill_after and proc.poll() is None and time.time() < deadline:
            time.sleep(0.02)
        ranks = rank_processes(proc.pid, args.train)
        killed = False
        if proc.poll() is None and ranks:
            os.kill(ranks[0], signal.SIGKILL)  # one rank dies, as on a failed node
            killed = True
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, _ = proc.communicate()
        print("  " + "\n  ".join(out.strip().splitlines()[-3:]), flush=True)
        check(f"a rank was killed with SIGKILL mid-run (after step {latest_step(folder)} was saved)",
              killed and proc.returncode != 0 and "final:" not in out,
              f"killed={killed} exit={proc.returncode}")
        check("latest names a complete checkpoint", latest_step(folder) >= args.kill_after,
              str(os.listdir(folder)) if os.path.isdir(folder) else "no folder")

        # 3. Resumed.
        resumed = run(launch + flags + ckpt + ["--resume", "auto"])
        check("the resumed run finishes", resumed.returncode == 0, resumed.stderr[-800:])
        check("it resumed from the checkpoint", "resumed from" in resumed.stdout, resumed.stdout[-800:])
        a, wa = summary(straight.stdout)
        b, wb = summary(resumed.stdout)
        check(f"final: test_acc and train_loss equal the uninterrupted run's ({a} vs {b})",
              a is not None and a == b)
        check(f"weights bit-identical (fnv1a64 {wa} vs {wb})", wa is not None and wa == wb)
        # A program with a GradScaler (lesson 08) prints its state: the resumed run must end
        # with the same scale and growth tracker.
        sa, sb = scaler_line(straight.stdout), scaler_line(resumed.stdout)
        if sa is not None or sb is not None:
            check(f"GradScaler state equal ({sa} vs {sb})", sa == sb)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{len(PASSED)} passed, {len(FAILED)} failed")
    return 0 if not FAILED else 1


if __name__ == "__main__":
    sys.exit(main())
