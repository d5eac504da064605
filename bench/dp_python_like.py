#!/usr/bin/env python3
"""Lesson 02's DataParallel with and without the interpreter-like lock (chapter §6), side by
side: the forward phase and the whole step per device count, runs interleaved.

  bench/dp_python_like.py                                  1, 2 and 4 cpu devices, batch 256
  bench/dp_python_like.py --batch-size 32 --python-call-us 30 --rounds 5
  bench/dp_python_like.py --devices cuda:0 cuda:0,cuda:1    logical GPUs

Each round runs lesson 02's `train` once without and once with --serialize-python-like
for every device list (the order of the pair swaps every round), --steps steps each, on
the same data and seed. Printed: medians and [min-max] over the rounds of the forward
phase and of the step (ms), and the difference of the medians. The load average is
printed before and after; on a busy machine trust the differences over the times.
"""
import argparse
import os
import re
import statistics
import subprocess
import sys


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build-dir", default="build")
    p.add_argument("--devices", nargs="+", default=["cpu:0", "cpu:0,cpu:1", "cpu:0,cpu:1,cpu:2,cpu:3"])
    p.add_argument("--model", default="mlp-bn")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--python-call-us", type=float, default=None,
                   help="busy work per module call under the lock (default: the program's)")
    p.add_argument("--data", default=None, help="passed to train (default: the program's)")
    return p.parse_args()


def run_once(args, devices, locked):
    cmd = [os.path.join(args.build_dir, "solutions/02_data_parallel/train"), "--devices", devices,
           "--model", args.model, "--batch-size", str(args.batch_size), "--steps", str(args.steps),
           "--epochs", "1", "--train-samples", str(args.batch_size * (args.steps + 1))]
    if args.data:
        cmd += ["--data", args.data]
    if locked:
        cmd.append("--serialize-python-like")
        if args.python_call_us is not None:
            cmd += ["--python-call-us", str(args.python_call_us)]
    out = subprocess.run(cmd, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"dp_python_like: {' '.join(cmd)} failed:\n{out.stdout}{out.stderr}")
    forward = float(re.search(r" forward ([0-9.]+)", out.stdout).group(1))
    step = float(re.search(r"step_ms=([0-9.]+)", out.stdout).group(1))
    return forward, step


def fmt(values):
    return f"{statistics.median(values):7.2f} [{min(values):.2f}-{max(values):.2f}]"


def main():
    args = parse()
    print(f"lesson 02 train, model {args.model}, batch {args.batch_size}, {args.steps} steps, "
          f"{args.rounds} rounds; {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}")
    results = {(d, lk): ([], []) for d in args.devices for lk in (False, True)}
    for r in range(args.rounds):
        for d in args.devices:
            for locked in ((False, True) if r % 2 == 0 else (True, False)):
                forward, step = run_once(args, d, locked)
                results[(d, locked)][0].append(forward)
                results[(d, locked)][1].append(step)
    print(f"{'devices':<26} {'lock':<4} {'forward ms/step':<24} {'step ms':<24}")
    for d in args.devices:
        for locked in (False, True):
            fw, st = results[(d, locked)]
            print(f"{d:<26} {'on' if locked else 'off':<4} {fmt(fw):<24} {fmt(st):<24}")
        diff = (statistics.median(results[(d, True)][0]) - statistics.median(results[(d, False)][0]))
        print(f"{'':<26} the lock adds {diff:.2f} ms to the forward (difference of the medians)")
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
