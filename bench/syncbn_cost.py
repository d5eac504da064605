#!/usr/bin/env python3
"""What SyncBatchNorm costs per training step: lesson 06's train with and without --sync-bn.

Runs `train --steps S` under mpirun, BatchNorm (the baseline) and SyncBatchNorm taking
turns (A B A B ...), the same ranks, batch, model and data, and prints each one's step
time (median, min, max over the repeats) and the difference. One more run of each with
--trace counts the collectives per step and rank in the trace: DDP's bucket all-reduces
and SyncBatchNorm's extra steps, with their bytes. The machine's load average is printed
before and after: on a shared machine the numbers move with it.

  python3 bench/syncbn_cost.py --ranks 4 --batch-size 8 --steps 60 --repeats 3
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_train(args, sync_bn, out_dir, tag, trace=False):
    metrics = os.path.join(out_dir, f"{tag}.jsonl")
    cmd = [os.path.join(ROOT, "tools", "mpirun"), "-np", str(args.ranks), args.program,
           "--model", args.model, "--batch-size", str(args.batch_size), "--epochs", "1",
           "--steps", str(args.steps), "--data", args.data, "--metrics", metrics,
           "--train-samples", str(args.train_samples), "--no-train-mode-eval"]
    if sync_bn:
        cmd.append("--sync-bn")
    trace_path = os.path.join(out_dir, f"{tag}.trace.json")
    if trace:
        cmd += ["--trace", trace_path]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if done.returncode != 0:
        sys.exit(f"syncbn_cost: {' '.join(cmd)} failed (exit {done.returncode}):\n"
                 f"{done.stdout[-2000:]}{done.stderr[-2000:]}")
    with open(metrics) as f:
        step_ms = json.loads(f.readlines()[-1])["step_ms"]
    return step_ms, trace_path


def collectives_per_step(trace_path, steps):
    """Spans per step on rank 0: DDP's bucket all-reduces and SyncBatchNorm's steps."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events
              if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("pid") == 0}
    counts, nbytes = {}, {}
    for e in events:
        if e.get("ph") != "X" or e.get("pid") != 0:
            continue
        name = e["name"]
        if name.startswith("all-reduce bucket"):
            name = "DDP all-reduce (buckets)"
        elif tracks.get(e.get("tid"), e.get("tid")) != "syncbn":
            continue
        counts[name] = counts.get(name, 0) + 1
        nbytes[name] = nbytes.get(name, 0) + e.get("args", {}).get("bytes", 0)
    return {k: (counts[k] / steps, nbytes[k] / counts[k]) for k in counts}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--program", default=os.path.join(ROOT, "build", "solutions",
                                                     "06_sync_batchnorm", "train"))
    p.add_argument("--ranks", type=int, default=4)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--model", default="cnn-small")
    p.add_argument("--steps", type=int, default=60, help="steps per run (the first epoch's)")
    p.add_argument("--train-samples", type=int, default=0,
                   help="use the first N training samples (0: all)")
    p.add_argument("--repeats", type=int, default=3, help="runs of each, interleaved")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--timeout", type=int, default=900, help="seconds per run")
    args = p.parse_args()
    if not os.access(args.program, os.X_OK):
        sys.exit(f"syncbn_cost: {args.program} is not built (ninja -C build solutions-06_sync_batchnorm)")

    load_before = os.getloadavg()
    times = {False: [], True: []}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.repeats):
            for sync_bn in (False, True):
                ms, _ = run_train(args, sync_bn, tmp, f"r{r}{'s' if sync_bn else 'b'}")
                times[sync_bn].append(ms)
        traced = {s: collectives_per_step(run_train(args, s, tmp, f"t{int(s)}", True)[1],
                                          args.steps) for s in (False, True)}
    load_after = os.getloadavg()

    print(f"# SyncBatchNorm cost: {args.ranks} ranks x batch {args.batch_size}, model "
          f"{args.model}, {args.steps} steps per run, {args.repeats} runs each, interleaved")
    print(f"# load average (1, 5, 15 min) before: {load_before[0]:.2f} {load_before[1]:.2f} "
          f"{load_before[2]:.2f}; after: {load_after[0]:.2f} {load_after[1]:.2f} "
          f"{load_after[2]:.2f}; {os.cpu_count()} cores")
    print(f"{'configuration':<24} {'step_ms median':>15} {'min':>8} {'max':>8}")
    for sync_bn, name in ((False, "BatchNorm (baseline)"), (True, "SyncBatchNorm")):
        t = times[sync_bn]
        print(f"{name:<24} {statistics.median(t):>15.2f} {min(t):>8.2f} {max(t):>8.2f}")
    base, sync = statistics.median(times[False]), statistics.median(times[True])
    print(f"SyncBatchNorm - BatchNorm: {sync - base:+.2f} ms per step ({(sync / base - 1) * 100:+.1f}%)")
    print("collectives per step on rank 0 (from --trace runs):")
    for sync_bn, name in ((False, "BatchNorm"), (True, "SyncBatchNorm")):
        for what, (per_step, avg_bytes) in sorted(traced[sync_bn].items()):
            print(f"  {name:<14} {what:<28} {per_step:5.1f} per step, {avg_bytes:8.0f} bytes each")


if __name__ == "__main__":
    main()
