#!/usr/bin/env python3
"""Where a program's GPU time goes, kernel by kernel, from Nsight Compute's per-launch rows.

  ncu --csv --page raw --print-units base --metrics gpu__time_duration.sum \\
      --clock-control none --cache-control none PROGRAM ARGS > rows.csv
  bench/kernel_summary.py rows.csv --steps 3 --wall-ms 21.2

Prints each kernel's launches and GPU time (total, per step, share), the launches and GPU
time per step, and, given the step's wall time measured without the profiler (--wall-ms),
the share of the step the GPU spent idle: time the host spends launching, synchronising,
allocating or waiting on a host read, which no kernel tuning removes. Per step means divided
by --steps: the program's other kernels (initialisation, evaluation) are counted too, so
profile a run that is mostly training steps.
"""
import argparse
import csv
import sys
from collections import defaultdict

METRIC = "gpu__time_duration.sum"


def read_rows(path):
    """(kernel name, nanoseconds) for every profiled launch in ncu's CSV; other lines (the
    program's own output, ncu's ==PROF== lines) are skipped."""
    rows, header = [], None
    with open(path, newline="", encoding="utf-8", errors="replace") as f:
        for rec in csv.reader(f):
            if header is None:
                if "Kernel Name" in rec and METRIC in rec:
                    header = {name: i for i, name in enumerate(rec)}
                continue
            if len(rec) != len(header) or not rec[header["ID"]].strip().isdigit():
                continue  # the units line, or a line of the program's output
            value = rec[header[METRIC]].replace(",", "").strip()
            try:
                rows.append((rec[header["Kernel Name"]], float(value)))
            except ValueError:
                continue
    if header is None:
        sys.exit(f"kernel_summary.py: {path}: no ncu CSV header with 'Kernel Name' and {METRIC} "
                 "(run ncu with --csv --page raw --metrics gpu__time_duration.sum)")
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("csv", help="ncu --csv --page raw --print-units base output")
    p.add_argument("--steps", type=int, default=1, help="training steps the run made")
    p.add_argument("--wall-ms", type=float, help="one step's wall time without the profiler")
    p.add_argument("--top", type=int, default=12, help="kernels listed (the costliest first)")
    p.add_argument("--label", default="", help="a name for the run, printed on each line")
    args = p.parse_args()
    if args.steps < 1:
        sys.exit("kernel_summary.py: --steps must be 1 or more")
    rows = read_rows(args.csv)
    if not rows:
        sys.exit(f"kernel_summary.py: {args.csv}: no kernel was profiled")
    launches, ns = defaultdict(int), defaultdict(float)
    for name, t in rows:
        launches[name] += 1
        ns[name] += t
    total_ms = sum(ns.values()) / 1e6
    tag = f"{args.label}: " if args.label else ""
    per_step = total_ms / args.steps
    print(f"{tag}{len(rows)} launches of {len(ns)} kernels, {total_ms:.3f} ms of GPU time; per step "
          f"({args.steps}): {len(rows) / args.steps:.0f} launches, {per_step:.3f} ms")
    if args.wall_ms and per_step > args.wall_ms:
        # The profiler runs kernels one at a time and, unless told --cache-control none,
        # with cold caches: its times can add up to more than the unprofiled step.
        print(f"{tag}step wall time {args.wall_ms:.3f} ms, less than the kernels' {per_step:.3f} ms "
              "under the profiler: its times are inflated (cold caches?); read the shares only")
    elif args.wall_ms:
        idle = 1 - per_step / args.wall_ms
        print(f"{tag}step wall time {args.wall_ms:.3f} ms: the GPU busy {100 * per_step / args.wall_ms:.0f}%, "
              f"idle {100 * idle:.0f}% (launches, synchronisations, allocations, host reads)")
    print(f"{tag}{'kernel':48} {'launches':>8} {'ms total':>9} {'ms/step':>8} {'share':>6}")
    for name in sorted(ns, key=ns.get, reverse=True)[:args.top]:
        short = name if len(name) <= 48 else name[:45] + "..."
        print(f"{tag}{short:48} {launches[name]:8d} {ns[name] / 1e6:9.3f} "
              f"{ns[name] / 1e6 / args.steps:8.3f} {100 * ns[name] / 1e6 / total_ms:5.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
